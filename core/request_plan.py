"""One model request, planned: layout, section budgets, token estimate, request-time pruning.

`plan_request()` is what `Agent.build_request()` and `/context` both use, so what
/context shows is what the next request would be.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from core.budget import SectionMeta, apply_budget, section_budget
from core.context import (
    RequestParts,
    message_for_request,
    render_dynamic,
    split_newest,
    static_prefix,
)
from core.pruning import PruneStats, prune_request
from core.tokens import TokenEstimator, effective_window, estimator_for

if TYPE_CHECKING:
    from core.turn import Agent, TurnContext

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


def request_parts(
    agent: Agent, turn: TurnContext, pending: list[dict[str, Any]], dynamic: str
) -> RequestParts:
    """The layout of the next request from the stored history and this turn's messages."""
    older, newest = split_newest(agent.store.history(turn.chat.id))
    group = turn.chat.kind != "private"
    limit = agent.config.context.tool_result_max_chars * 4
    return RequestParts(
        prefix=static_prefix(agent.config, agent.tools.names, agent.today()),
        summary=agent.store.session(turn.chat.id).summary,
        history=[message_for_request(m, group, limit) for m in older],
        dynamic=dynamic,
        newest=[message_for_request(m, group, limit) for m in newest] + pending,
    )


async def plan_request(
    agent: Agent,
    turn: TurnContext,
    pending: list[dict[str, Any]],
    *,
    tools: bool,
    protect_turns: int | None = None,
) -> RequestPlan:
    """Build the next request; prune it when its estimate passes `prune_threshold`.

    `protect_turns` forces pruning with that many protected user turns (emergency use).
    """
    config = agent.config
    estimator = estimator_for(agent.store.conn, config, agent.llm.model)
    budgeted = apply_budget(
        await agent.dynamic_sections(turn), section_budget(config, estimator.chars_per_token)
    )
    parts = request_parts(agent, turn, pending, render_dynamic(budgeted.sections))
    plan = RequestPlan(
        messages=parts.messages(),
        tools=agent.tools.schemas() if tools else None,
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
