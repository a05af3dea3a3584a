"""Injects PROMOTED strategies as the "Learned strategies" section; `/strategies` lists them."""

from __future__ import annotations

from itertools import groupby

from core.extensions import Command, ContextSection, Extension
from core.turn import TurnContext
from memory.strategies.lifecycle import ARCHIVED
from memory.strategies.store import Strategy, StrategyStore

SECTION_KEY = "learned_strategies"
SECTION_PRIORITY = 40
HEADER = (
    "Learned strategies: what has worked with this user before, as evidence, not orders. "
    "Apply one when it fits; you may name its [id]."
)


def render_strategies(strategies: list[Strategy]) -> str:
    """Lines grouped by section, each section ordered by helpful − harmful."""
    if not strategies:
        return ""
    ordered = sorted(strategies, key=lambda s: (s.section, -s.scores.net, s.id))
    blocks = []
    for section, members in groupby(ordered, key=lambda s: s.section):
        blocks.append(f"## {section}\n" + "\n".join(s.line() for s in members))
    return HEADER + "\n" + "\n".join(blocks)


def describe(strategy: Strategy) -> str:
    scope = "global" if strategy.chat_id is None else "chat"
    return (
        f"[{strategy.id}] {strategy.state} {scope} {strategy.section}: {strategy.content} "
        f"(helpful={strategy.scores.helpful:.1f}, harmful={strategy.scores.harmful:.1f}, "
        f"neutral={strategy.scores.neutral:.1f})"
    )


class StrategyExtension(Extension):
    name = "strategies"

    async def context_sections(self, turn: TurnContext) -> list[ContextSection]:
        store = StrategyStore(turn.conn)
        promoted = store.promoted(turn.chat.id)
        text = render_strategies(promoted)
        if not text:
            return []
        store.mark_used([s.id for s in promoted])
        return [ContextSection(SECTION_KEY, "strategies", text, priority=SECTION_PRIORITY)]

    def commands(self) -> list[Command]:
        return [Command("strategies", "list learned strategies with their counters", _list)]


async def _list(turn: TurnContext, args: str) -> str:
    strategies = [s for s in StrategyStore(turn.conn).for_chat(turn.chat.id) if s.state != ARCHIVED]
    if not strategies:
        return "No learned strategies yet."
    return "Learned strategies (only PROMOTED ones reach the model):\n" + "\n".join(
        describe(s) for s in strategies
    )
