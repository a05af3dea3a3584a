"""One model request, planned: layout, section budgets, token estimate, request-time pruning.

`RequestPlanner.plan()` is what the turn loop and `/context` both use, so what /context
shows is what the next request would be. It takes the dynamic sections as given: the
caller gathers them from the extensions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from functools import cached_property
from typing import Any

from core.api import Chat, ContextSection
from core.config import Config
from core.context.budget import SectionMeta, apply_budget, section_budget
from core.context.pruning import PruneStats, prune_request
from core.context.request import (
    RequestParts,
    message_for_request,
    render_dynamic,
    shown_lines,
    split_newest,
    static_prefix,
    unseen_sections,
    with_context,
)
from core.model.calibration import estimator_for
from core.model.profile import (
    Window,
    effective_window,
    load_profile,
    request_tokens_for,
    resolve_window,
    tools_enabled,
    window_for,
)
from core.model.tokens import TokenEstimator
from core.storage.store import SessionStore
from core.tools.registry import ToolRegistry

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
    tools_in_prompt: bool = True  # False: the server's template drops the tool schemas
    # (user message id, its block) to keep once the request is sent; None when the
    # newest user message already has its block
    context_to_keep: tuple[int, str] | None = None
    answer_tokens: int = 0  # the max_tokens to send: what the window keeps for the answer

    @cached_property
    def tokens(self) -> int:
        return self.estimator.request(self.messages, self.tools if self.tools_in_prompt else None)

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
    history = [
        message
        for entry, context in zip(parts.history, parts.contexts, strict=True)
        for message in with_context(entry, context, late_system=True)
    ]
    return {
        "prefix": total([{"role": "system", "content": parts.prefix}]),
        "summary": total(summary),
        "history": total(history),  # with the blocks kept on its user messages
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

    def window(self) -> Window:
        """The model's context window and where the figure comes from."""
        return window_for(self.store, self.config.llm, self.model)

    def parts(
        self,
        chat: Chat,
        pending: Sequence[dict[str, Any]],
        sections: Sequence[ContextSection],
        late_system: bool = True,
    ) -> tuple[RequestParts, tuple[int, str] | None]:
        """The layout of the next request from the stored history and this turn's messages,
        and the block to keep on the newest user message once it is sent.

        The newest user message gets the block it was first sent with, or else (it is
        being sent now) the lines of `sections` that no block in the history shows.
        """
        older, newest = split_newest(self.store.history(chat.id))
        group = chat.kind != "private"
        limit = self.config.context.tool_result_max_chars * 4
        contexts = tuple(message.context or "" for message in older)
        kept = newest[0].context if newest else None
        dynamic = kept
        if dynamic is None:
            dynamic = render_dynamic(unseen_sections(sections, shown_lines(contexts)))
        parts = RequestParts(
            prefix=static_prefix(self.config, self.tools.names_for(chat), self.today()),
            summary=self.store.session(chat.id).summary,
            history=[message_for_request(m, group, limit) for m in older],
            dynamic=dynamic,
            newest=[message_for_request(m, group, limit) for m in newest] + list(pending),
            late_system=late_system,
            contexts=contexts,
        )
        return parts, (newest[0].id, dynamic) if newest and kept is None else None

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
        profile = load_profile(self.store, self.model)  # read once per plan
        window = resolve_window(config.llm, profile)
        usable = effective_window(window.tokens, config.llm.max_output_tokens)
        budget = section_budget(config, estimator.chars_per_token, usable)
        budgeted = apply_budget(sections, budget)
        late_system = profile.late_system is not False
        parts, to_keep = self.parts(chat, pending, budgeted.sections, late_system)
        with_tools = tools and tools_enabled(config.llm, profile)
        plan = RequestPlan(
            messages=parts.messages(),
            tools=self.tools.schemas(chat) if with_tools else None,
            sections=budgeted.meta,
            estimator=estimator,
            window=usable,
            parts=_part_tokens(estimator, parts),
            tools_in_prompt=profile.tools_in_prompt is not False,
            context_to_keep=to_keep,
            answer_tokens=request_tokens_for(window.tokens, config.llm.max_output_tokens),
        )
        if protect_turns is None:
            if plan.share <= config.context.prune_threshold:
                return plan
            protect_turns = config.context.protect_turns
        messages, stats = prune_request(plan.messages, protect_turns)
        return replace(plan, messages=messages, prune=stats)
