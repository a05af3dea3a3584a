"""One model request, planned: layout, section budgets, token estimate, request-time pruning.

`RequestPlanner.plan()` is what the turn loop and `/context` both use, so what /context
shows is what the next request would be. It takes the dynamic sections as given: the
caller gathers them from the extensions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from functools import cached_property
from typing import Any

from core.api import Chat, ContextSection
from core.config import Config
from core.context.budget import SectionMeta, apply_budget, section_budget
from core.context.focus import focus_sections
from core.context.pruning import (
    Fill,
    FillLevels,
    PruneStats,
    fill_start,
    is_block,
    prune_before,
    prune_request,
    with_its_block,
)
from core.context.request import (
    SHORT_PROMPT_TOKENS,
    SMALL_WINDOW_TOKENS,
    RequestParts,
    message_for_request,
    render_dynamic,
    shown_lines,
    split_newest,
    static_prefix,
    unseen_sections,
    with_context,
)
from core.context.tool_offer import ToolOffer, offer_tools, without_tools
from core.model.calibration import estimator_for
from core.model.profile import (
    ModelProfile,
    Window,
    effective_window,
    load_profile,
    request_tokens_for,
    resolve_window,
    tools_enabled,
    window_for,
)
from core.model.tokens import TokenEstimator
from core.storage.store import SessionStore, StoredMessage
from core.tools.registry import ToolRegistry

logger = logging.getLogger(__name__)


def small_window_protect_turns(usable: int) -> int:
    """User turns kept whole when a small window is pruned: one per ~1,500 usable tokens
    (a turn of ~700-character messages is ~220 tokens), at least the newest."""
    return max(1, usable // 1_500)


def late_system_allowed(config: Config, profile: ModelProfile) -> bool:
    """Whether context blocks may go in system messages after the first: the template
    accepts them, and does not write the tool schemas into each one (llama-cpp-python's
    chatml-function-calling does: one system message then carries them once)."""
    repeats = bool(profile.tools_per_system) and tools_enabled(config.llm, profile)
    return profile.late_system is not False and not repeats


PRESSURE_LEVELS = ((0.9, "critical"), (0.75, "high"), (0.5, "medium"))


def pressure(tokens: int, window: int) -> str:
    """low < 50% < medium < 75% < high < 90% < critical."""
    share = tokens / window if window else 1.0
    return next((name for floor, name in PRESSURE_LEVELS if share >= floor), "low")


def starts_turn(messages: Sequence[dict[str, Any]], index: int) -> bool:
    """Whether `index` is 0 or a user message of `messages` (or the block just before one)."""
    if index == 0:
        return True
    if index >= len(messages):
        return False
    if is_block(messages[index]):
        index += 1
    return index < len(messages) and messages[index].get("role") == "user"


@dataclass(frozen=True)
class PruneBoundary:
    """Where a sent request's pruned parts ended (indexes in its unpruned messages), for
    one chat's session (its compactions and start; a compaction makes a new session)."""

    chat_id: int
    session: tuple[int, int]
    fill: Fill


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
    tool_offer: ToolOffer | None = None  # what was offered, compacted or left out
    images: int = 0  # image parts the request will carry (attached when it is sent)
    image_tokens: int = 0  # what they cost the model, as planned (`core.chat.images`)
    # where the pruned part ends, to remember once the request is sent (`RequestPlanner`)
    boundary: PruneBoundary | None = None

    @cached_property
    def tokens(self) -> int:
        tools = self.tools if self.tools_in_prompt else None
        return self.estimator.request(self.messages, tools) + self.image_tokens

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
    # per chat, the boundary of the last request sent (`keep_boundary`); a new process
    # replays it from the history (`core.context.pruning.fill_start`)
    boundaries: dict[int, PruneBoundary] = field(default_factory=dict, repr=False)

    def keep_boundary(self, plan: RequestPlan) -> None:
        """Remember where `plan`, just sent, pruned: the next request starts from there."""
        if plan.boundary is not None:
            self.boundaries[plan.boundary.chat_id] = plan.boundary

    def window(self) -> Window:
        """The model's context window and where the figure comes from."""
        return window_for(self.store, self.config.llm, self.model)

    def window_chars(self) -> int:
        """The usable window (without the answer's reserve) in characters, as estimated."""
        usable = effective_window(self.window().tokens, self.config.llm.max_output_tokens)
        return int(usable * estimator_for(self.store, self.config, self.model).chars_per_token)

    def parts(
        self,
        chat: Chat,
        pending: Sequence[dict[str, Any]],
        sections: Sequence[ContextSection],
        late_system: bool = True,
        short: bool = False,
        history: Sequence[StoredMessage] | None = None,
    ) -> tuple[RequestParts, tuple[int, str] | None]:
        """The layout of the next request from the stored history and this turn's messages,
        and the block to keep on the newest user message once it is sent.

        The newest user message gets the block it was first sent with, or else (it is
        being sent now) the lines of `sections` that no block in the history shows.
        """
        stored = list(self.store.history(chat.id) if history is None else history)
        older, newest = split_newest(stored)
        group = chat.kind != "private"
        limit = self.config.context.tool_result_max_chars * 4
        contexts = tuple(message.context or "" for message in older)
        kept = newest[0].context if newest else None
        dynamic = kept
        session = self.store.session(chat.id)
        if dynamic is None:
            dynamic = render_dynamic(unseen_sections(sections, shown_lines(contexts)))
        parts = RequestParts(
            prefix=static_prefix(
                self.config, self.tools.names_for(chat), self.today(), short=short
            ),
            summary=session.summary,
            history=[message_for_request(m, group, limit) for m in older],
            dynamic=dynamic,
            newest=[message_for_request(m, group, limit) for m in newest] + list(pending),
            late_system=late_system,
            contexts=contexts,
        )
        return parts, (newest[0].id, dynamic) if newest and kept is None else None

    def offer(
        self, chat: Chat, parts: RequestParts, estimator: TokenEstimator, budget: int
    ) -> ToolOffer:
        """The chat's tools within `budget` tokens, chosen by the newest user message and
        the tools called in the history."""
        users = [entry for entry in parts.newest if entry.get("role") == "user"]
        message = str(users[0].get("content") or "") if users else ""
        recent = [
            str(call.get("function", {}).get("name"))
            for entry in parts.history + parts.newest
            for call in entry.get("tool_calls") or []
        ]
        return offer_tools(self.tools.tools_for(chat), budget, estimator, message, recent)

    def plan(
        self,
        chat: Chat,
        sections: Sequence[ContextSection],
        pending: Sequence[dict[str, Any]] = (),
        *,
        tools: bool,
        protect_turns: int | None = None,
        images: Sequence[int] = (),
        tools_scale: float = 1.0,
    ) -> RequestPlan:
        """The next request, pruned where its chat's pruned part ends (`pruned`);
        `protect_turns` forces pruning with that many protected user turns (emergency use).
        `images` are the planned tokens of each image the request will carry (its turn's).
        `tools_scale` shrinks the tools' budget (a retry after the server found it too long).
        """
        config = self.config
        profile = load_profile(self.store, self.model)  # read once per plan
        estimator = estimator_for(self.store, config, self.model, profile)
        window = resolve_window(config.llm, profile)
        usable = effective_window(window.tokens, config.llm.max_output_tokens)
        budget = section_budget(config, estimator.chars_per_token, usable)
        history = self.store.history(chat.id)
        _, newest = split_newest(history)
        message = newest[0].content if newest else ""
        budgeted = apply_budget(focus_sections(sections, message), budget)
        late_system = late_system_allowed(config, profile)
        in_prompt = profile.tools_in_prompt is not False
        short = usable < SHORT_PROMPT_TOKENS and in_prompt
        parts, to_keep = self.parts(chat, pending, budgeted.sections, late_system, short, history)
        offer = None
        if tools and tools_enabled(config.llm, profile):
            budget_tokens = int(usable * config.context.tools_share * tools_scale)
            offer = self.offer(chat, parts, estimator, budget_tokens)
        plan = RequestPlan(
            messages=parts.messages(),
            tools=offer.schemas if offer is not None else None,
            sections=budgeted.meta,
            estimator=estimator,
            window=usable,
            parts=_part_tokens(estimator, parts) | {"images": sum(images)},
            tools_in_prompt=in_prompt,
            context_to_keep=to_keep,
            answer_tokens=request_tokens_for(window.tokens, config.llm.max_output_tokens),
            tool_offer=offer,
            images=len(images),
            image_tokens=sum(images),
            boundary=self.new_boundary(chat),
        )
        return self.fit_tools(chat, parts, self.pruned(plan, protect_turns, len(pending)))

    def new_boundary(self, chat: Chat) -> PruneBoundary:
        """Nothing pruned yet, in the chat's current session (`pruned` decides)."""
        session = self.store.session(chat.id)
        return PruneBoundary(
            chat.id, (session.compaction_count, session.started_at_message_id), Fill()
        )

    def fit_tools(self, chat: Chat, parts: RequestParts, plan: RequestPlan) -> RequestPlan:
        """The last guard: tools that would take the request past the window are offered
        within the room its messages leave (the offer's own rules: compacted, then the
        essential, relevant and recent ones), or not at all when none fits. A request never
        goes over the window because of its tools."""
        if not plan.tools or not plan.tools_in_prompt or plan.tokens <= plan.window:
            return plan
        estimator = plan.estimator
        room = plan.window - (plan.tokens - estimator.tools(plan.tools, plan.messages))
        offer = self.offer(chat, parts, estimator, max(0, room))
        if offer.schemas and estimator.tools(offer.schemas, plan.messages) > room:
            offer = without_tools(offer, "no room left in the window")
        logger.info("tools cut to fit the window in %s: %d of %d offered (room %d tokens)",
                    chat.key, len(offer.schemas), len(plan.tools), room)  # fmt: skip
        return replace(plan, tools=offer.schemas or None, tool_offer=offer)

    def pruned(self, plan: RequestPlan, protect_turns: int | None, pending: int = 0) -> RequestPlan:
        """`plan` pruned where `fill_start` says, from where the chat's last request sent
        was (`keep_boundary`): the boundaries move once per fill of the window, so the
        pruned part stays byte-identical between moves and a server's KV cache serves it;
        or before the last `protect_turns` turns when that is given (emergency use, not
        remembered). A small window also shortens old turns, and protects fewer. The last
        `pending` messages (this turn's own) are never pruned, nor counted as turns: the
        "continue your cut reply" request must not shorten the message being answered,
        and a follow-up request prunes as its turn's first did."""
        small = plan.window < SMALL_WINDOW_TOKENS
        cut = len(plan.messages) - pending
        if protect_turns is not None:  # not remembered: the next request starts as before
            messages, stats = prune_request(plan.messages[:cut], protect_turns, small_window=small)
            return replace(
                plan, messages=messages + plan.messages[cut:], prune=stats, boundary=None
            )
        context = self.config.context
        protect = context.protect_turns
        if small:
            protect = min(protect, small_window_protect_turns(plan.window))
        head = plan.messages[:cut]
        levels = FillLevels(
            fixed=plan.tokens - plan.estimator.request(plan.messages),  # tools and images
            prune=int(plan.window * context.prune_threshold),
            compact=int(plan.window * context.compaction_threshold),
        )
        previous = self.previous_fill(plan, head, protect)
        if previous is not None and pending:
            fill = previous  # a follow-up request of the turn: its first request decided
        else:
            fill = fill_start(head, protect, plan.estimator, levels, small, previous)
        kept = replace(plan.boundary, fill=fill) if plan.boundary is not None else None
        if fill == Fill():
            return replace(plan, boundary=kept)
        messages, stats = prune_before(head, fill.start, small, fill.recalled_until)
        return replace(plan, messages=messages + plan.messages[cut:], prune=stats, boundary=kept)

    def previous_fill(
        self, plan: RequestPlan, head: Sequence[dict[str, Any]], protect_turns: int
    ) -> Fill | None:
        """Where the chat's last request sent was pruned, if it was in this session and
        its boundaries still start turns of `head` (after a compaction: moved to the
        newest `protect_turns` turns and the newest block); None: `fill_start` replays
        them."""
        if plan.boundary is None:
            return None
        kept = self.boundaries.get(plan.boundary.chat_id)
        if kept is None:
            return None
        if kept.session != plan.boundary.session:
            # Compacted since: this request is evaluated from the summary on anyway, so
            # the kept part is pruned now (as a move would), not at the next move.
            users = [index for index, entry in enumerate(head) if entry.get("role") == "user"]
            if not users:
                return None
            protected = with_its_block(head, users[max(0, len(users) - protect_turns)])
            small = plan.window < SMALL_WINDOW_TOKENS
            return Fill(protected, with_its_block(head, users[-1]) if small else 0)
        if all(starts_turn(head, index) for index in (kept.fill.start, kept.fill.recalled_until)):
            return kept.fill
        return None
