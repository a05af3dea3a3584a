"""The turn loop: store the user message, build the request, run tools, persist the reply."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from core.api import Inbound, Outbound, TurnContext
from core.calibration import calibrate
from core.chat_keys import is_control_chat
from core.compaction import Compactor
from core.config import Config
from core.errors import ContextOverflow, LLMError, LLMTimeout, LLMUnavailable
from core.extensions import Extensions
from core.llm import LLM, Completion
from core.request_plan import RequestPlan, RequestPlanner
from core.store import NewMessage, SessionStore
from core.text import clean_text
from core.tokens import request_chars
from core.tool_results import keep_tool_result
from core.usage import complete_recorded

logger = logging.getLogger(__name__)

USAGE_KIND = "turn"


@dataclass
class Agent:
    """One bot: handles each inbound message with the store, the model and the extensions.

    Built only by the composition root (`bots.runtime`).
    """

    config: Config
    store: SessionStore
    llm: LLM
    extensions: Extensions
    planner: RequestPlanner
    compactor: Compactor

    async def handle(self, inbound: Inbound) -> Outbound | None:
        """Handle one inbound message; return the reply, or None when none is due."""
        inbound = replace(inbound, text=clean_text(inbound.text))
        chat = self.store.get_or_create_chat(
            inbound.channel, inbound.chat_id, inbound.chat_title, inbound.chat_kind
        )
        turn = TurnContext(chat, inbound, is_control_chat(self.config, chat))
        parsed = parse_command(inbound.text) if inbound.respond else None
        command = self.extensions.command(parsed[0]) if parsed else None
        if parsed is not None and command is not None:
            return self._reply(inbound, await command.handler(turn, parsed[1]))
        sender = inbound.sender_name or inbound.sender_id
        [message_id] = self.store.append(chat.id, [NewMessage("user", inbound.text, sender=sender)])
        turn = replace(turn, user_message_id=message_id)
        if not inbound.respond:
            return None
        answer = await self.extensions.intercept(turn)
        if answer is not None:
            self.store.append(chat.id, [NewMessage("assistant", answer)])
            return self._reply(inbound, answer)
        try:
            text = await self.run_model_turn(turn)
        except LLMError as exc:
            logger.warning("turn failed for chat %s: %s", chat.key, exc)
            return self._reply(inbound, user_facing_error(exc), is_error=True)
        await self.extensions.after_turn(turn)
        return self._reply(inbound, text)

    async def run_model_turn(self, turn: TurnContext) -> str:
        """The tool loop. The turn's assistant and tool messages are stored together at the end."""
        pending: list[dict[str, Any]] = []
        completion: Completion | None = None
        tools = self.extensions.tools
        for _ in range(self.config.agent.max_tool_iterations):
            completion = await self.call_model(turn, pending, tools=True)
            if not completion.tool_calls:
                break
            pending.append(
                {
                    "role": "assistant",
                    "content": completion.content,
                    "tool_calls": [call.to_openai() for call in completion.tool_calls],
                }
            )
            for call in completion.tool_calls:
                result = await tools.execute(call.name, call.arguments, turn)
                result = keep_tool_result(self.config, turn.chat, call.id, call.name, result)
                pending.append({"role": "tool", "tool_call_id": call.id, "content": result})
        else:
            completion = await self.call_model(turn, pending, tools=False)
        assert completion is not None
        text = completion.content.strip() or "(no answer)"
        pending.append({"role": "assistant", "content": text})
        self.store.append(turn.chat.id, [_to_new_message(entry) for entry in pending])
        return text

    async def call_model(
        self, turn: TurnContext, pending: list[dict[str, Any]], *, tools: bool
    ) -> Completion:
        """One model call with the request built afresh (pruned, compacted when over the
        threshold); a context-overflow error compacts and retries once."""
        plan = await self.prepare_request(turn, pending, tools=tools)
        try:
            return await self._complete(turn, plan)
        except ContextOverflow as exc:
            logger.warning("context overflow in %s (%s); compacting, retrying", turn.chat.key, exc)
        await self.compactor.compact(turn, "overflow")
        plan = await self.plan(turn, pending, tools=tools, protect_turns=1)
        return await self._complete(turn, plan)

    async def prepare_request(
        self, turn: TurnContext, pending: list[dict[str, Any]], *, tools: bool
    ) -> RequestPlan:
        """The next request: compacted first when its estimate passes the threshold."""
        plan = await self.plan(turn, pending, tools=tools)
        over = plan.share > self.config.context.compaction_threshold
        if over and await self.compactor.compact(turn, "threshold") is not None:
            plan = await self.plan(turn, pending, tools=tools)
        if plan.tokens > plan.window:
            plan = await self.plan(turn, pending, tools=tools, protect_turns=1)
        return plan

    async def plan(
        self,
        turn: TurnContext,
        pending: list[dict[str, Any]],
        *,
        tools: bool,
        protect_turns: int | None = None,
    ) -> RequestPlan:
        """The planned request with the extensions' current dynamic sections."""
        sections = await self.extensions.context_sections(turn)
        return self.planner.plan(
            turn.chat, sections, pending, tools=tools, protect_turns=protect_turns
        )

    async def _complete(self, turn: TurnContext, plan: RequestPlan) -> Completion:
        """Send a planned request; record usage and calibrate the token estimate."""
        completion = await complete_recorded(
            self.llm, self.store, turn.chat.id, USAGE_KIND, plan.messages, plan.tools
        )
        calibrate(
            self.store,
            self.config,
            self.llm.model,
            request_chars(plan.messages, plan.tools),
            len(plan.messages),
            completion.prompt_tokens,
        )
        return completion

    def _reply(self, inbound: Inbound, text: str, is_error: bool = False) -> Outbound:
        return Outbound(
            inbound.channel, inbound.chat_id, text, reply_to=inbound.message_id, is_error=is_error
        )


def parse_command(text: str) -> tuple[str, str] | None:
    """`/name args` (also `/name@botname`) → (name, args); anything else → None."""
    if not text.startswith("/") or len(text) < 2:
        return None
    head, _, args = text[1:].partition(" ")
    name = head.split("@", 1)[0].strip().lower()
    return (name, args.strip()) if name.isidentifier() else None


def user_facing_error(exc: LLMError) -> str:
    if isinstance(exc, LLMTimeout):
        return "Sorry, the model took too long to answer. Your message is saved; please try again."
    if isinstance(exc, LLMUnavailable):
        return "Sorry, the model is unavailable right now. Your message is saved; please try again."
    return "Sorry, I could not get a usable answer from the model. Your message is saved."


def _to_new_message(entry: dict[str, Any]) -> NewMessage:
    return NewMessage(
        role=entry["role"],
        content=entry.get("content") or "",
        tool_calls=entry.get("tool_calls"),
        tool_call_id=entry.get("tool_call_id"),
    )
