"""The learned strategies' storage interface (`StrategyStore`) and its records.

`memory.strategies.strategy_store.DatabaseStrategyStore` is its one implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from memory.strategies.lifecycle import Scores

Clock = Callable[[], datetime]
TAGS = ("helpful", "harmful", "neutral")


@dataclass(frozen=True)
class Strategy:
    id: int
    chat_id: int | None
    section: str
    content: str
    stored: Scores  # as of evidence_at
    scores: Scores  # decayed to the time it was read
    state: str
    created_at: str
    updated_at: str
    last_used_at: str
    evidence_at: str
    state_changed_at: str

    def line(self) -> str:
        """The injected form: `- [sID] text (helpful=H, harmful=K)`; the model cites the
        marker `[sID]` when the strategy shaped its reply (`memory.strategies.citations`)."""
        helpful, harmful = round(self.scores.helpful), round(self.scores.harmful)
        return f"- [s{self.id}] {self.content} (helpful={helpful}, harmful={harmful})"


class StrategyEvent(NamedTuple):
    """One logged change of a strategy (ADD, UPDATE, TAG, STATE) and the run that made it."""

    kind: str
    delta: dict[str, Any]
    run_id: int | None
    at: str


class StrategyStore(Protocol):
    """Every read and write of strategies; every change is logged as a `StrategyEvent`."""

    clock: Clock

    def transaction(self) -> AbstractContextManager[Any]: ...

    def get(self, strategy_id: int) -> Strategy | None: ...

    def for_chat(
        self,
        chat_id: int | None,
        *,
        include_global: bool = True,
        states: Sequence[str] | None = None,
    ) -> list[Strategy]:
        """Strategies of a chat (and global ones), best net score first."""
        ...

    def promoted(self, chat_id: int) -> list[Strategy]:
        """The chat's own PROMOTED strategies: what a request injects. Learned strategies
        have no global scope: they describe what works with the people of one chat, and
        guidance for every chat belongs in the global AGENTS.md (written from a control
        chat). Rows with no chat from older versions are listed, never injected."""
        ...

    def add(
        self, chat_id: int | None, section: str, content: str, run_id: int | None = None
    ) -> int: ...

    def update(self, strategy_id: int, content: str, run_id: int | None = None) -> None: ...

    def tag(self, strategy_id: int, tag: str, run_id: int | None = None) -> str:
        """Add one piece of evidence; return the state afterwards."""
        ...

    def archive(
        self, strategy_id: int, run_id: int | None = None, reason: str = "removed"
    ) -> None: ...

    def mark_used(self, strategy_ids: Sequence[int]) -> None:
        """Record that these strategies reached a request (they are in use)."""
        ...

    def maintain(self, chat_id: int | None = None, run_id: int | None = None) -> int:
        """Apply due transitions (decay, cool-down, archiving); return how many changed."""
        ...

    def events(self, strategy_id: int) -> list[StrategyEvent]: ...

    def forget_chat(self, chat_id: int) -> int:
        """Delete the chat's strategies (archived ones too) and their events; return how
        many strategies went."""
        ...

    def cite(self, strategy_ids: Sequence[int], chat_id: int, message_id: int) -> None:
        """Record that the reply to the user message `message_id` cited these strategies."""
        ...

    def pending_citations(self, chat_id: int) -> set[int]:
        """Strategies cited in the chat since a reflector pass last judged them."""
        ...

    def judged(self, strategy_ids: Sequence[int], chat_id: int, run_id: int | None) -> None:
        """Record that a reflector pass judged the chat's citations of these strategies."""
        ...

    def recent_tags(self, strategy_id: int, limit: int = 3) -> list[str]:
        """The last `limit` verdicts (helpful, harmful, neutral) on a strategy, oldest first."""
        ...
