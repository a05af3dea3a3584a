"""One model request, planned: layout, section budgets, token estimate, request-time pruning.

`RequestPlanner.plan()` is what the turn loop and `/context` both use, so what /context
shows is what the next request would be. It takes the dynamic sections as given: the
caller gathers them from the extensions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property
from typing import Any

from core.api import Chat, ContextSection
from core.budget import SectionMeta, apply_budget, section_budget
from core.calibration import estimator_for
from core.config import Config
from core.context import (
    RequestParts,
    message_for_request,
    render_dynamic,
    split_newest,
    static_prefix,
)
from core.pruning import PruneStats, prune_request
from core.store import SessionStore
from core.tokens import TokenEstimator, effective_window
from core.tools import ToolRegistry

PRESSURE_LEVELS = ((0.9, "critical"), (0.75, "high"), (0.5, "medium"))


def pressure(tokens: int, window: int) -> str:
    """low < 50% < medium < 75% < high < 90% < critical."""
    share = tokens / window if window else 1.0
    return next((name for floor, name in PRESSURE_LEVELS if share >= floor), "low")


@dataclass(frozen=True)
class RequestPlan:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    sections: list[SectionMeta]
    estimator: TokenEstimator
    window: int  # effective window: context window minus max_output_tokens
    parts: dict[str, int]  # estimated tokens per part of the layout
    prune: PruneStats = field(default_factory=PruneStats)

    @cached_property
    def tokens(self) -> int:
        return self.estimator.request(self.messages, self.tools)

    @property
    def share(self) -> float:
        return self.tokens / self.window

    @property
    def pressure(self) -> str:
        return pressure(self.tokens, self.window)


def _part_tokens(estimator: TokenEstimator, parts: RequestParts) -> dict[str, int]:
    def total(messages: list[dict[str, Any]]) -> int:
        return sum(estimator.message(message) for message in messages)

    summary = [{"role": "system", "content": parts.summary}] if parts.summary else []
    dynamic = [{"role": "system", "content": parts.dynamic}] if parts.dynamic else []
    return {
        "prefix": total([{"role": "system", "content": parts.prefix}]),
        "summary": total(summary),
        "history": total(parts.history),
        "dynamic": total(dynamic),
        "newest": total(parts.newest),
    }


@dataclass
class RequestPlanner:
    """Plans a chat's next request from the config, its stored session, the tools and the
    dynamic sections."""

    config: Config
    store: SessionStore
    tools: ToolRegistry
    model: str
    today: Callable[[], date] = date.today

    def parts(self, chat: Chat, pending: Sequence[dict[str, Any]], dynamic: str) -> RequestParts:
        """The layout of the next request from the stored history and this turn's messages."""
        older, newest = split_newest(self.store.history(chat.id))
        group = chat.kind != "private"
        limit = self.config.context.tool_result_max_chars * 4
        return RequestParts(
            prefix=static_prefix(self.config, self.tools.names, self.today()),
            summary=self.store.session(chat.id).summary,
            history=[message_for_request(m, group, limit) for m in older],
            dynamic=dynamic,
            newest=[message_for_request(m, group, limit) for m in newest] + list(pending),
        )

    def plan(
        self,
        chat: Chat,
        sections: Sequence[ContextSection],
        pending: Sequence[dict[str, Any]] = (),
        *,
        tools: bool,
        protect_turns: int | None = None,
    ) -> RequestPlan:
        """The next request, pruned when its estimate passes `prune_threshold`.

        `protect_turns` forces pruning with that many protected user turns (emergency use).
        """
        config = self.config
        estimator = estimator_for(self.store, config, self.model)
        budgeted = apply_budget(sections, section_budget(config, estimator.chars_per_token))
        parts = self.parts(chat, pending, render_dynamic(budgeted.sections))
        plan = RequestPlan(
            messages=parts.messages(),
            tools=self.tools.schemas() if tools else None,
            sections=budgeted.meta,
            estimator=estimator,
            window=effective_window(config.llm),
            parts=_part_tokens(estimator, parts),
        )
        if protect_turns is None:
            if plan.share <= config.context.prune_threshold:
                return plan
            protect_turns = config.context.protect_turns
        messages, stats = prune_request(plan.messages, protect_turns)
        return RequestPlan(
            messages, plan.tools, plan.sections, estimator, plan.window, plan.parts, stats
        )
