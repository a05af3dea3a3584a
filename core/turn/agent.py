"""The turn loop: accept (store) a message on arrival; answer it in its turn: add it to the
history, build the request, run tools, persist the turn with its reply."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from core.api import Inbound, Outbound, TurnContext
from core.chat.keys import is_control_chat
from core.chat.media import (
    NO_VISION,
    MediaTurn,
    claim_no_vision_notice,
    fit_images,
    has_media,
    keep_attachments,
    planned_image_tokens,
    prepare_media,
    refuses_images,
    sees_images,
    with_images,
)
from core.config import Config
from core.context.compaction import Compactor
from core.context.plan import RequestPlan, RequestPlanner
from core.errors import (
    AnswerNotJSON,
    ContextOverflow,
    LeaseLost,
    LLMBadResponse,
    LLMError,
    LLMRejected,
    LLMTimeout,
    LLMUnavailable,
    ModelMissing,
    TemplateRejected,
    ToolsUnsupported,
)
from core.model.calibration import calibrate_request, learn_from_overflow
from core.model.client import LLM, Completion, ToolCall
from core.model.profile import learn, load_profile
from core.model.stream import INTERRUPTED, TextSink
from core.model.usage import complete_recorded
from core.storage.file_store import FileStore
from core.storage.live_turn_store import DatabaseLiveTurnStore, LiveTurnKey
from core.storage.store import (
    DeliveryStore,
    NewMessage,
    SessionStore,
    StoredInbound,
    StoredReply,
    TurnLease,
)
from core.text import cap_reply, clean_text, strip_think
from core.tools.results import keep_tool_result
from core.tools.text_calls import strip_tool_text
from core.turn.activity import TurnActivity
from core.turn.citations import split_citations
from core.turn.extensions import Extensions
from core.turn.live import PROCESS_OWNER, LiveTurn, request_summary, tee
from core.turn.loop_guard import RepeatGuard
from core.turn.outgoing import Outgoing
from core.turn.tool_round import run_tool_round

logger = logging.getLogger(__name__)

USAGE_KIND = "turn"
NO_ANSWER = "(no answer)"
CUT_MARKER = "[reply cut: the model reached its output limit]"
STREAM_CUT_MARKER = "… [reply cut: the model stopped answering]"
# Where this turn's model answers are shown as they grow (None: not streamed). A context
# variable, not an argument, so the tool loop between `answer` and the model call need
# not carry it; each chat's turns run in their own task, so chats never share it.
_SHOWING: ContextVar[TextSink | None] = ContextVar("showing", default=None)
# This turn's media: its images are attached to its message in each request of the turn,
# never stored (`core.chat.media`). Per task, like `_SHOWING`.
_MEDIA: ContextVar[MediaTurn | None] = ContextVar("media", default=None)
# This turn's live row for the dashboard (`core.turn.live`); None when not recorded.
_LIVE: ContextVar[LiveTurn | None] = ContextVar("live", default=None)
CONTINUE_REQUEST = {
    "role": "user",
    "content": "Your reply was cut off at the output limit. Continue exactly where it "
    "stopped, without repeating anything.",
}


@dataclass
class Agent:
    """One bot: handles each inbound message with the store, the model and the extensions.

    Built only by `core.turn.assembly.build_agent`. A message is first accepted (stored as it
    arrives, `accept`), then answered in its chat's turn (`answer`); `core.turn.dispatcher`
    decides when a turn runs and delivers the reply.
    """

    config: Config
    store: SessionStore
    llm: LLM
    extensions: Extensions
    planner: RequestPlanner
    compactor: Compactor
    deliveries: DeliveryStore
    files: FileStore
    outgoing: Outgoing  # messages nobody asked for: the dispatcher binds to it
    live: DatabaseLiveTurnStore | None = None  # where the dashboard sees turns as they run
    activity: TurnActivity = field(default_factory=TurnActivity)  # turns running now

    def accept(self, inbound: Inbound) -> StoredInbound | None:
        """Store an arriving message before it waits for its chat's turn; None when the
        chat already has it (a replayed update). Raises `StorageError` (`StorageFull` on
        a full disk) when it could not be stored."""
        with self.store.transaction():
            chat = self.store.get_or_create_chat(
                inbound.channel, inbound.chat_id, inbound.chat_title, inbound.chat_kind
            )
            inbound = keep_attachments(self.files, chat, inbound)  # bytes to the chat's files
            inbound = replace(inbound, text=clean_text(inbound.text))
            return self.deliveries.receive(chat, inbound)

    async def answer(
        self,
        message: StoredInbound,
        lease: TurnLease | None = None,
        on_text: TextSink | None = None,
    ) -> StoredReply | None:
        """Take the turn of a stored message: run its command, or add it to the history and
        answer it. The reply is recorded with the turn (undelivered); None when none is
        due. With a `lease`, every write checks it is still held (`LeaseLost` if not).
        With `on_text`, the model's answers are streamed and shown there as they grow;
        the reply recorded is still the final text only, for the channel to `send`."""
        live = self._live_turn(message, lease)
        token = _SHOWING.set(tee(on_text, live.text) if live else on_text)
        media = _MEDIA.set(None)
        live_token = _LIVE.set(live)
        self.activity.begin()
        try:
            reply = await self._answer(message, lease)
        except BaseException:
            if live is not None:
                live.finish("failed", "")
            raise
        finally:
            self.activity.end()
            _LIVE.reset(live_token)
            _MEDIA.reset(media)
            _SHOWING.reset(token)
        if live is not None and reply is not None:
            live.finish("failed" if reply.outbound.is_error else "done", reply.outbound.text)
        elif live is not None:
            live.finish("done", "")
        return reply

    def _live_turn(self, message: StoredInbound, lease: TurnLease | None) -> LiveTurn | None:
        """The turn's live row (written from its first model call), or None unrecorded."""
        if self.live is None or not message.inbound.respond:
            return None
        owner = lease.owner if lease is not None else PROCESS_OWNER
        return LiveTurn(self.live, LiveTurnKey(message.chat.id, owner, message.id))

    async def _answer(self, message: StoredInbound, lease: TurnLease | None) -> StoredReply | None:
        inbound, chat = message.inbound, message.chat
        turn = TurnContext(chat, inbound, is_control_chat(self.config, chat), message.message_id)
        parsed = parse_command(inbound.text) if inbound.respond else None
        command = self.extensions.command(parsed[0]) if parsed else None
        if parsed is not None and command is not None:
            text = await command.handler(turn, parsed[1])
            if self.store.chat_by_id(chat.id) is None:  # the command deleted the chat
                return StoredReply(0, self._reply(inbound, text))  # (/forgetme): unrecorded
            return self.finish(message, lease, [], self._reply(inbound, text))
        message, media = await self._media(message)
        turn = replace(turn, inbound=message.inbound)
        if not turn.user_message_id:
            turn = replace(turn, user_message_id=self._add_to_history(message, lease))
        if not inbound.respond:
            return self.finish(message, lease, [], None)
        if media is not None and media.refusal:
            return self.finish(message, lease, [], self._reply(inbound, media.refusal, True))
        answer = await self.extensions.intercept(turn)
        if answer is not None:
            return self.finish(
                message, lease, [NewMessage("assistant", answer)], self._reply(inbound, answer)
            )
        try:
            text, entries = await self.run_model_turn(turn)
        except LLMError as exc:
            logger.warning("turn failed for chat %s: %s", chat.key, exc)
            error = self._reply(inbound, user_facing_error(exc), is_error=True)
            return self.finish(message, lease, [], error)
        notice = self._notice(turn, media)
        text, cited = split_citations(text)
        if cited:
            entries[-1] = entries[-1] | {"content": text}
        reply = self.finish(message, lease, [_to_new_message(entry) for entry in entries],
                            self._reply(inbound, notice + text))  # fmt: skip
        try:
            await self.extensions.after_turn(replace(turn, cited=cited))
        except Exception:  # the reply is recorded: a hook's failure must not cost it
            logger.exception("after_turn failed in %s", chat.key)
        return reply

    async def _media(self, message: StoredInbound) -> tuple[StoredInbound, MediaTurn | None]:
        """The message with its voice notes transcribed, and what its media make of the turn
        (its images wait in `_MEDIA` for the requests); None when it has none or is not
        answered (nothing is transcribed or decoded for unaddressed group chatter)."""
        inbound = message.inbound
        if not inbound.respond or not has_media(inbound.text):
            return message, None
        profile = load_profile(self.store, self.llm.model)
        vision = sees_images(self.config, profile.vision, self.llm.model)
        media = await prepare_media(self.config, self.files, message.chat, inbound.text, vision)
        _MEDIA.set(media)
        return replace(message, inbound=replace(inbound, text=media.text)), media

    def _notice(self, turn: TurnContext, media: MediaTurn | None) -> str:
        """What the reply says first: that the model cannot see images (once per chat), or
        that the turn's images did not fit the window."""
        if media is None:
            return ""
        if media.notice:
            return media.notice + "\n\n"
        if not media.no_vision:
            return ""
        return NO_VISION + "\n\n" if claim_no_vision_notice(self.files, turn.chat) else ""

    def _add_to_history(self, message: StoredInbound, lease: TurnLease | None) -> int:
        """Add the user message to the history as its turn starts: once, since a turn run
        again (after a crash or a stop) finds it linked there."""
        inbound = message.inbound
        sender = inbound.sender_name or inbound.sender_id
        with self.store.transaction():
            self._check(lease)
            [message_id] = self.store.append(
                message.chat.id,
                [NewMessage("user", inbound.text, sender=sender, created_at=inbound.sent_at)],
            )
            self.deliveries.start_turn(message.id, message_id)
        return message_id

    def finish(
        self,
        message: StoredInbound,
        lease: TurnLease | None,
        entries: list[NewMessage],
        reply: Outbound | None,
    ) -> StoredReply | None:
        """Store the turn's messages, mark `message` handled and record its reply, together."""
        with self.store.transaction():
            self._check(lease)
            if entries:
                self.store.append(message.chat.id, entries)
            return self.deliveries.finish(message.id, reply)

    def _check(self, lease: TurnLease | None) -> None:
        if lease is not None and not self.deliveries.holds_turn(lease):
            raise LeaseLost(f"another process took over chat {lease.chat_id}")

    async def handle(self, inbound: Inbound) -> Outbound | None:
        """Accept and answer in one call, for a caller that delivers the reply itself and
        runs one turn of a chat at a time (tests, benchmarks): the reply is marked
        delivered as it is handed over. Channels go through `core.turn.dispatcher` instead."""
        message = self.accept(inbound)
        if message is None:
            return None
        reply = await self.answer(message)
        if reply is None:
            return None
        if reply.id:
            self.deliveries.mark_delivered(reply.id)
        return reply.outbound

    async def run_model_turn(self, turn: TurnContext) -> tuple[str, list[dict[str, Any]]]:
        """The tool loop. It ends when the model answers, repeats a call it made in this
        turn, spends the turn's `max_tool_calls` or reaches `max_tool_iterations`. Returns
        the reply and the turn's assistant and tool messages, for the caller to store
        together."""
        pending: list[dict[str, Any]] = []
        guard = RepeatGuard()
        answer: Completion | None = None
        budget = self.config.agent.max_tool_calls
        for _ in range(self.config.agent.max_tool_iterations):
            completion = await self.call_model(turn, pending, tools=True)
            if not completion.tool_calls:
                answer = completion
                break
            fresh = guard.fresh(completion.tool_calls)
            pending += await self.run_tools(turn, fresh, budget)
            budget -= len(fresh)
            if len(fresh) < len(completion.tool_calls):
                logger.warning("model repeated a tool call in %s; asking without tools",
                               turn.chat.key)  # fmt: skip
                break
            if budget <= 0:
                logger.warning("tool-call budget spent in %s; asking without tools",
                               turn.chat.key)  # fmt: skip
                break
        text = await self.final_reply(turn, pending, answer)
        pending.append({"role": "assistant", "content": text})
        return text, pending

    async def run_tools(
        self, turn: TurnContext, calls: list[ToolCall], budget: int | None = None
    ) -> list[dict[str, Any]]:
        """The assistant message carrying `calls` and their results (`run_tool_round`);
        those past the turn's remaining `budget` are not run and get an error the model
        can read."""
        spent = (
            f"error: not run: this turn's budget of {self.config.agent.max_tool_calls} tool "
            "calls is spent; answer with what you have"
        )
        window_chars = self.planner.window_chars()

        def keep(call: ToolCall, result: str) -> str:
            return keep_tool_result(
                self.config, self.files, turn.chat, call.id, call.name, result,
                window_chars=window_chars,
            )  # fmt: skip

        allowed = len(calls) if budget is None else budget
        live = _LIVE.get()
        if live is not None:
            live.tool_calls(calls)
        done = await run_tool_round(self.extensions.tools, turn, calls, allowed, spent, keep)
        if live is not None:
            live.tool_results(done)
        return done

    async def final_reply(
        self, turn: TurnContext, pending: list[dict[str, Any]], answer: Completion | None
    ) -> str:
        """The text the user reads and the history keeps. Without an `answer` yet, or when
        it is empty or only tool calls written as text, the model is asked (once more)
        without tools; a reply cut at the output limit is continued once. Capped at
        `[agent] max_reply_chars`, so the history keeps what the user was sent."""
        asked_with_tools = answer is not None
        if answer is None:
            answer = await self.call_model(turn, pending, tools=False)
        text, written_calls = strip_tool_text(answer.content)
        if not text and (asked_with_tools or written_calls):
            logger.info("no usable text in the answer in %s (%d calls written as text);"
                        " asking without tools", turn.chat.key, written_calls)  # fmt: skip
            answer = await self.call_model(turn, pending, tools=False)
            text, _ = strip_tool_text(answer.content)
        text = strip_think(text)
        if answer.finish_reason == INTERRUPTED:
            text = f"{text} {STREAM_CUT_MARKER}" if text else STREAM_CUT_MARKER
        if answer.finish_reason == "length":
            text = await self.continue_cut(turn, pending, text)
        return cap_reply(text or NO_ANSWER, self.config.agent.max_reply_chars)

    async def continue_cut(
        self, turn: TurnContext, pending: list[dict[str, Any]], part: str
    ) -> str:
        """`part`, cut at the output limit, joined with the model's continuation; marked
        as cut when the continuation is cut too (or fails)."""
        ask = [*pending, {"role": "assistant", "content": part}, dict(CONTINUE_REQUEST)]
        try:
            with _showing_after(part):
                more = await self.call_model(turn, ask, tools=False)
        except LLMError as exc:
            logger.warning("continuing a cut reply failed in %s: %s", turn.chat.key, exc)
            return mark_cut(part)
        text = join_parts(part, strip_think(strip_tool_text(more.content)[0]))
        if more.finish_reason == INTERRUPTED:
            return f"{text} {STREAM_CUT_MARKER}"
        return mark_cut(text) if more.finish_reason == "length" else text

    async def call_model(
        self, turn: TurnContext, pending: list[dict[str, Any]], *, tools: bool
    ) -> Completion:
        """One model call with the request built afresh (pruned, compacted when over the
        threshold). What the server's refusal teaches is remembered and the call retried
        once per lesson: a stated window (compact, retry; the turn's images shrunk or left
        out), a template that refuses a late system message (context moves into the user
        message), no tool support."""
        plan = await self.prepare_request(turn, pending, tools=tools)
        lessons: set[type[LLMError]] = set()
        while True:
            try:
                return await self._complete(turn, plan)
            except (ContextOverflow, TemplateRejected, ToolsUnsupported) as exc:
                overflow = isinstance(exc, ContextOverflow)
                if overflow and ContextOverflow in lessons and plan.tools:
                    # Still over with fewer tools (llama-cpp-python's own loop of tool
                    # calls can fill the window): an answer without tools, not an error.
                    logger.warning("request over the window again in %s (%s); asking without"
                                   " tools", turn.chat.key, exc)  # fmt: skip
                    plan = await self.plan(turn, pending, tools=False, protect_turns=1)
                    continue
                if type(exc) in lessons or not self.learn_from(exc, plan):
                    raise
                lessons.add(type(exc))
                logger.warning("model refused a request in %s (%s); retrying", turn.chat.key, exc)
            media = _MEDIA.get()
            if overflow and media is not None and media.images:
                # The images cost more than planned: half the room, or left out.
                await fit_images(self.config, media, plan.image_tokens // 2)
            if overflow:
                await self.compactor.compact(turn, "overflow", overhead(plan))
                # The tools cost more than planned too, maybe: half their budget.
                plan = await self.plan(turn, pending, tools=tools, protect_turns=1, tools_scale=0.5)
            else:
                plan = await self.prepare_request(turn, pending, tools=tools)

    def learn_from(self, exc: LLMError, plan: RequestPlan) -> bool:
        """Remember what a refusal of `plan` says about the model; False when it teaches
        nothing new."""
        model = self.llm.model
        profile = load_profile(self.store, model)
        sent_tools = plan.tools is not None
        if isinstance(exc, ContextOverflow):
            if exc.limit and not self.config.llm.context_window and exc.limit != profile.window:
                learn(self.store, model, window=exc.limit, window_source="overflow error")
            if exc.prompt_tokens and plan.tools and plan.tools_in_prompt:
                learn_from_overflow(
                    self.store, self.config, model, plan.messages, plan.tools, exc.prompt_tokens
                )
            return True
        if isinstance(exc, TemplateRejected) and profile.late_system is not False:
            learn(self.store, model, late_system=False)
            return True
        if isinstance(exc, ToolsUnsupported) and sent_tools and self.config.llm.tools == "auto":
            learn(self.store, model, tools=False)
            return True
        return False

    async def prepare_request(
        self, turn: TurnContext, pending: list[dict[str, Any]], *, tools: bool
    ) -> RequestPlan:
        """The next request: compacted first when its estimate passes the threshold; a
        follow-up request of the turn (a tool result, a cut reply's continuation) only when
        it would not fit the window: the turn's first request decided, and a compaction
        there would cost a summary for a few tokens more."""
        plan = await self.plan(turn, pending, tools=tools)
        over = plan.share > (1.0 if pending else self.config.context.compaction_threshold)
        if over and (
            await self.compactor.compact(turn, "threshold", overhead(plan), plan.messages)
            is not None
        ):
            plan = await self.plan(turn, pending, tools=tools)
        if plan.tokens > plan.window:
            plan = await self.plan(turn, pending, tools=tools, protect_turns=1)
        media = _MEDIA.get()
        if plan.tokens > plan.window and plan.images and media is not None:
            # The images get the room the words leave them, shrunk to it (or left out).
            await fit_images(self.config, media, plan.window - plan.tokens + plan.image_tokens)
            plan = await self.plan(turn, pending, tools=tools, protect_turns=1)
        return plan

    async def plan(
        self,
        turn: TurnContext,
        pending: list[dict[str, Any]],
        *,
        tools: bool,
        protect_turns: int | None = None,
        tools_scale: float = 1.0,
    ) -> RequestPlan:
        """The planned request with the extensions' current dynamic sections."""
        sections = await self.extensions.context_sections(turn)
        images = planned_image_tokens(self.config, _MEDIA.get())
        return self.planner.plan(
            turn.chat, sections, pending, tools=tools, protect_turns=protect_turns,
            images=images, tools_scale=tools_scale,
        )  # fmt: skip

    async def _complete(self, turn: TurnContext, plan: RequestPlan) -> Completion:
        """Send a planned request; record usage and calibrate the token estimate. The
        newest user message keeps the context block it was sent with (`core.context.request`)."""
        media = _MEDIA.get()
        messages = with_images(plan.messages, media.images if media else {})
        try:
            completion = await self._send(turn, plan, messages)
        except LLMError as exc:
            if media is None or messages is plan.messages or not refuses_images(exc):
                raise
            self._learn_no_vision(turn, media, exc)
            messages = plan.messages
            completion = await self._send(turn, plan, messages)
        if plan.context_to_keep is not None:
            self.store.keep_context(*plan.context_to_keep)
        self.planner.keep_boundary(plan)
        if messages is not plan.messages or len(completion.tool_calls) > 1:
            # An image's tokens would skew the text estimate's calibration; llama-cpp-python
            # reports, for several tool calls, the sum of the prompts it ran for each.
            return completion
        calibrate_request(
            self.store,
            self.config,
            self.llm.model,
            plan.messages,
            plan.tools,
            completion.prompt_tokens,
        )
        return completion

    async def _send(
        self, turn: TurnContext, plan: RequestPlan, messages: list[dict[str, Any]]
    ) -> Completion:
        live = _LIVE.get()
        if live is not None:
            figures = {"tokens": plan.tokens, "window": plan.window,
                       "answer_tokens": plan.answer_tokens,
                       "image_tokens": plan.image_tokens}  # fmt: skip
            live.request(request_summary(messages, plan.tools, figures))
        return await complete_recorded(
            self.llm,
            self.store,
            turn.chat.id,
            USAGE_KIND,
            messages,
            plan.tools,
            max_tokens=plan.answer_tokens,
            on_text=_SHOWING.get(),
        )

    def _learn_no_vision(self, turn: TurnContext, media: MediaTurn, exc: LLMError) -> None:
        """The server refused the turn's images: the model is text-only (remembered unless
        `[media] vision` decides), and the turn goes on with the words alone."""
        logger.warning("the model refused images in %s (%s); sending the text alone",
                       turn.chat.key, exc)  # fmt: skip
        if self.config.media.vision == "auto":
            learn(self.store, self.llm.model, vision=False)
        media.images.clear()
        media.no_vision = True

    def _reply(self, inbound: Inbound, text: str, is_error: bool = False) -> Outbound:
        """The reply to `inbound`, capped at `[agent] max_reply_chars` (a command's too)."""
        text = cap_reply(text, self.config.agent.max_reply_chars)
        return Outbound(
            inbound.channel, inbound.chat_id, text, reply_to=inbound.message_id, is_error=is_error
        )


def overhead(plan: RequestPlan) -> int:
    """Estimated tokens of a request outside its summary and history: the prefix, the
    dynamic context, the turn's images, the tools (when they reach the prompt), the
    request's own overhead."""
    tools = plan.tools if plan.tools_in_prompt else None
    fixed = plan.parts["prefix"] + plan.parts["dynamic"] + plan.image_tokens
    return fixed + plan.estimator.request([], tools)


@contextmanager
def _showing_after(shown: str) -> Iterator[None]:
    """While inside, a streamed answer is shown after `shown` (a cut reply's continuation)."""
    outer = _SHOWING.get()
    if outer is None:
        yield
        return

    async def after(text: str) -> None:
        await outer(join_parts(shown, text))

    token = _SHOWING.set(after)
    try:
        yield
    finally:
        _SHOWING.reset(token)


def join_parts(first: str, rest: str) -> str:
    """A cut reply and its continuation as one text (a space between two words)."""
    if not first or not rest:
        return first or rest
    if first[-1].isspace() or rest[0].isspace() or rest[0] in ".,;:!?)]}'\"":
        return first + rest
    return f"{first} {rest}"


def mark_cut(text: str) -> str:
    """`text` with the visible sign that it is incomplete."""
    return f"{text}\n\n{CUT_MARKER}" if text else CUT_MARKER


def parse_command(text: str) -> tuple[str, str] | None:
    """`/name args` (also `/name@botname`) → (name, args); anything else → None."""
    if not text.startswith("/") or len(text) < 2:
        return None
    head, _, args = text[1:].partition(" ")
    name = head.split("@", 1)[0].strip().lower()
    return (name, args.strip()) if name.isidentifier() else None


def user_facing_error(exc: LLMError) -> str:
    """What the user reads when a turn fails (their message is stored before any call)."""
    if isinstance(exc, LLMTimeout):
        return "Sorry, the model took too long to answer. Your message is saved; please try again."
    if isinstance(exc, LLMUnavailable):
        return "Sorry, the model is unavailable right now. Your message is saved; please try again."
    if isinstance(exc, ModelMissing):
        return (
            "Sorry, the model server does not serve the configured model (see `mnemo doctor`)."
            " Your message is saved."
        )
    if isinstance(exc, ToolsUnsupported):
        return (
            'Sorry, this model does not support tools; set [llm] tools = "off" or "auto".'
            " Your message is saved."
        )
    if isinstance(exc, ContextOverflow):
        return (
            "Sorry, this conversation no longer fits the model's context window, even after"
            " compacting. Your message is saved; try /compact or /reset."
        )
    if isinstance(exc, AnswerNotJSON):
        return (
            "Sorry, the model server answered something that is not JSON (is [llm] base_url"
            " its OpenAI-compatible /v1 address? `mnemo doctor` checks it). Your message is saved."
        )
    if isinstance(exc, LLMBadResponse):
        return (
            "Sorry, the model server's answer was not a chat completion I can read (see the"
            " log). Your message is saved."
        )
    if isinstance(exc, LLMRejected):
        return (
            "Sorry, the model server refused the request (see `mnemo doctor` and the log)."
            " Your message is saved."
        )
    return "Sorry, I could not get a usable answer from the model. Your message is saved."


def _to_new_message(entry: dict[str, Any]) -> NewMessage:
    return NewMessage(
        role=entry["role"],
        content=entry.get("content") or "",
        tool_calls=entry.get("tool_calls"),
        tool_call_id=entry.get("tool_call_id"),
    )
