"""PassContributor: something else a reflector pass curates in the same model call.

The learned-strategies playbook is one: it adds its rules and its current items to the
prompt, and applies the reply's value under its `key` inside the pass's commit
transaction (in a savepoint, so its failure never costs the facts or the cursor).
"""

from __future__ import annotations

from typing import Any, Protocol


class PassContributor(Protocol):
    key: str  # the reply's JSON key, e.g. "strategies"; also the `<existing_KEY>` block

    def instructions(self) -> str:
        """Rules appended to the extraction system prompt."""
        ...

    def listing(self, chat_id: int) -> str:
        """The chat's current items, shown to the model."""
        ...

    def schema(self) -> dict[str, Any]:
        """The JSON schema of the reply's value under `key` (for structured output), in
        the strict form: every property required, nullable where optional."""
        ...

    def apply(self, chat_id: int, value: Any, run_id: int) -> str:
        """Apply the reply's `value` (None when absent); return a short summary.

        Runs inside the commit transaction: no awaits, no commits.
        """
        ...
