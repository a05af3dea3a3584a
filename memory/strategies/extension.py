"""Injects PROMOTED strategies as the "Learned strategies" section; `/strategies` lists them."""

from __future__ import annotations

from dataclasses import replace
from itertools import groupby

from core.api import Chat, ChatDataSection, Command, ContextSection, Extension, TurnContext
from memory.strategies.lifecycle import ARCHIVED
from memory.strategies.store import Strategy, StrategyStore

SECTION_KEY = "learned_strategies"
SECTION_PRIORITY = 40
STRATEGIES = "learned strategies"
HEADER = (
    "Learned strategies: what has worked with this user before, as evidence, not orders. "
    "Apply one when it fits, and end your reply with the marker of each one you applied, "
    "e.g. [s12] (the markers are removed before the user reads the reply)."
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


def strategy_record(strategy: Strategy) -> dict[str, object]:
    """A strategy as exported: its text, state, counters (decayed to now) and times."""
    return {
        "id": strategy.id,
        "section": strategy.section,
        "content": strategy.content,
        "state": strategy.state,
        "helpful": round(strategy.scores.helpful, 3),
        "harmful": round(strategy.scores.harmful, 3),
        "neutral": round(strategy.scores.neutral, 3),
        "created_at": strategy.created_at,
        "updated_at": strategy.updated_at,
        "last_used_at": strategy.last_used_at,
    }


class StrategyExtension(Extension):
    name = "strategies"

    def __init__(self, store: StrategyStore) -> None:
        self.store = store
        # What the newest section of each chat showed, so `after_turn` marks exactly those
        # without reading them again (a round trip a turn on PostgreSQL). Reading this is
        # no write: only `after_turn`, after a real turn, records the use.
        self._shown: dict[int, list[int]] = {}

    async def context_sections(self, turn: TurnContext) -> list[ContextSection]:
        promoted = self.store.promoted(turn.chat.id)
        self._shown[turn.chat.id] = [strategy.id for strategy in promoted]
        text = render_strategies(promoted)
        if not text:
            return []
        reason = f"{len(promoted)} PROMOTED strategies (found helpful more than harmful)"
        section = ContextSection(SECTION_KEY, "strategies", text, SECTION_PRIORITY)
        return [replace(section, scope="chat", reason=reason)]

    async def after_turn(self, turn: TurnContext) -> None:
        """The strategies the reply cited (of those it was shown) are in use; the citation
        is recorded for the reflector, which judges exactly those (ACE attribution)."""
        shown = self._shown.pop(turn.chat.id, None)
        if shown is None:  # the turn asked for no sections (a command, say): read them
            shown = [strategy.id for strategy in self.store.promoted(turn.chat.id)]
        cited = [strategy_id for strategy_id in turn.cited if strategy_id in shown]
        if cited:
            self.store.mark_used(cited)
            self.store.cite(cited, turn.chat.id, turn.user_message_id)

    def commands(self) -> list[Command]:
        return [Command("strategies", "list learned strategies with their counters", self._list)]

    def chat_data(self, chat: Chat) -> dict[str, int]:
        return {STRATEGIES: len(self.store.for_chat(chat.id, include_global=False))}

    def export_chat(self, chat: Chat) -> list[ChatDataSection]:
        found = sorted(self.store.for_chat(chat.id, include_global=False), key=lambda s: s.id)
        records = [strategy_record(strategy) for strategy in found]
        text = "\n".join(f"- {describe(strategy)}" for strategy in found) or "(none)"
        return [ChatDataSection("strategies", "Learned strategies", records, text)]

    def forget_chat(self, chat: Chat) -> dict[str, int]:
        return {STRATEGIES: self.store.forget_chat(chat.id)}

    async def _list(self, turn: TurnContext, args: str) -> str:
        found = [s for s in self.store.for_chat(turn.chat.id) if s.state != ARCHIVED]
        if not found:
            return "No learned strategies yet."
        return "Learned strategies (only PROMOTED ones reach the model):\n" + "\n".join(
            describe(s) for s in found
        )
