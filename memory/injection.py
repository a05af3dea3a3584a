"""Budgeted injection of structured memories: the best-ranked that fit, as `[CATEGORY] text`."""

from __future__ import annotations

from collections.abc import Sequence

from core.api import ContextSection
from memory.hidden_text import visible_text
from memory.retrieval import RankedMemory
from memory.store import Memory, MemoryStore

SECTION_KEY = "memories"
SECTION_PRIORITY = 60
PER_MEMORY_OVERHEAD = 10
MORE_HINT = "(+{n} more memories: use structured_memory_search)"


def memory_cost(memory: Memory) -> float:
    """Token cost of one injected memory: len(content)/4 + 10."""
    return len(memory.content) / 4 + PER_MEMORY_OVERHEAD


def max_injectable(token_budget: int) -> int:
    """How many memories could fit at most (each costs more than the overhead)."""
    return token_budget // PER_MEMORY_OVERHEAD + 1


def select_within_budget(ranked: Sequence[RankedMemory], token_budget: int) -> list[Memory]:
    """Walk the ranking best first, keeping every memory that still fits the budget."""
    chosen: list[Memory] = []
    spent = 0.0
    for item in ranked:
        cost = memory_cost(item.memory)
        if spent + cost <= token_budget:
            chosen.append(item.memory)
            spent += cost
    return chosen


def render_memories(chosen: Sequence[Memory], left_out: int) -> str:
    lines = [visible_text(memory.line()) for memory in chosen]  # older rows may hide some
    if left_out > 0:
        lines.append(MORE_HINT.format(n=left_out))
    return "\n".join(lines)


def memories_section(
    store: MemoryStore, chat_id: int, ranked: Sequence[RankedMemory], token_budget: int
) -> ContextSection | None:
    """The structured-memory block for one request, or None when there is nothing to show."""
    total = store.count_active(chat_id, with_global=True)
    if total == 0 or token_budget <= 0:
        return None
    chosen = select_within_budget(ranked, token_budget)
    text = render_memories(chosen, total - len(chosen))
    reason = (
        f"the {len(chosen)} of {total} memories ranked best against the newest message"
        f" that fit {token_budget} tokens"
    )
    return ContextSection(
        SECTION_KEY, "structured memories", text, SECTION_PRIORITY, scope="chat and global",
        reason=reason,
    )  # fmt: skip
