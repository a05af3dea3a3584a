"""StrategyCurator: the learned-strategies playbook as a reflector pass contributor.

It lends `reflector.curation` (issue 7) to the pass: its rules and the chat's current
bullets go into the extraction request, and the reply's `"strategies"` operations are
applied in the pass's commit transaction, tagged with the run id.
"""

from __future__ import annotations

from typing import Any

from memory.strategies.store import StrategyStore
from reflector.contributors import PassContributor
from reflector.curation import (
    INSTRUCTIONS,
    OPERATIONS_SCHEMA,
    apply_operations,
    existing_block,
    parse_operations,
)


class StrategyCurator:
    """A `PassContributor` for the `strategies` key."""

    key = "strategies"

    def __init__(self, store: StrategyStore) -> None:
        self.store = store

    def instructions(self) -> str:
        return INSTRUCTIONS

    def listing(self, chat_id: int) -> str:
        return existing_block(self.store, chat_id)

    def schema(self) -> dict[str, Any]:
        return OPERATIONS_SCHEMA

    def apply(self, chat_id: int, value: Any, run_id: int) -> str:
        operations, dropped = parse_operations(value)
        cited = self.store.pending_citations(chat_id)
        tally = apply_operations(self.store, chat_id, operations, run_id, cited)
        self.store.judged(sorted(cited), chat_id, run_id)
        self.store.maintain(chat_id, run_id)
        return (
            f"strategies: {tally.added} added, {tally.updated} updated, {tally.tagged} tagged, "
            f"{tally.merged} merged, {tally.removed} removed, {tally.rejected + dropped} rejected"
        )


def default_contributors(strategies: StrategyStore) -> list[PassContributor]:
    """What every reflector pass curates besides facts."""
    return [StrategyCurator(strategies)]
