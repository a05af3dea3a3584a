"""The turn loop: store the user message, build the request, run tools, persist the reply."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from core.compaction import compact_session
from core.config import Config
from core.db import Connection
from core.errors import ContextOverflow, LLMError, LLMTimeout, LLMUnavailable
from core.events import Inbound, Outbound
from core.extensions import Command, ContextSection, Extension
from core.llm import LLM, Completion
from core.request_plan import RequestPlan, plan_request
from core.store import Chat, NewMessage, SessionStore
from core.tokens import calibrate, request_chars
from core.tool_results import READ_TOOL, keep_tool_result
from core.tools import BUILTIN_TOOLS, ToolRegistry

logger = logging.getLogger(__name__)

QUERY_CHARS = 500


def clean_text(text: str) -> str:
    """Text safe to store: valid UTF-8, no NUL bytes, platform line endings unified."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text.replace("\x00", "").replace("\r\n", "\n")


@dataclass
class TurnContext:
    """Everything a tool, command or extension needs to know about the current turn."""

    agent: Agent
    chat: Chat
    inbound: Inbound
    user_message_id: int = 0

    @property
    def store(self) -> SessionStore:
        return self.agent.store

    @property
    def conn(self) -> Connection:
        return self.agent.store.conn

    @property
    def config(self) -> Config:
        return self.agent.config

    @property
    def query(self) -> str:
        """What memory is ranked against: the newest user message, last 500 chars."""
        return self.inbound.text[-QUERY_CHARS:]

    @property
    def is_control_chat(self) -> bool:
        controls = self.config.agent.control_chats
        return self.chat.key in controls or self.chat.external_chat_id in controls


@dataclass
class Agent:
    """One bot: config, storage, model, tools, commands and extensions."""

    config: Config
    store: SessionStore
    llm: LLM
    extensions: list[Extension] = field(default_factory=list)
    today: Callable[[], date] = date.today
    tools: ToolRegistry = field(init=False)
    commands: dict[str, Command] = field(init=False)

    def __post_init__(self) -> None:
        self.tools = ToolRegistry([*BUILTIN_TOOLS, READ_TOOL])
        from core.commands import builtin_commands

        self.commands = {}
        for command in builtin_commands():
            self.commands[command.name] = command
        for extension in self.extensions:
            for tool in extension.tools():
                self.tools.register(tool)
            for command in extension.commands():
                self.commands[command.name] = command

    def add_extension(self, extension: Extension) -> None:
        self.extensions.append(extension)
        for tool in extension.tools():
            self.tools.register(tool)
        for command in extension.commands():
            self.commands[command.name] = command

    def command_list(self) -> list[Command]:
        return sorted(self.commands.values(), key=lambda command: command.name)

    async def handle(self, inbound: Inbound) -> Outbound | None:
        """Handle one inbound message; return the reply, or None when none is due."""
        inbound = _with_clean_text(inbound)
        chat = self.store.get_or_create_chat(
            inbound.channel, inbound.chat_id, inbound.chat_title, inbound.chat_kind
        )
        turn = TurnContext(self, chat, inbound)
        command = parse_command(inbound.text) if inbound.respond else None
        if command is not None and command[0] in self.commands:
            reply = await self.commands[command[0]].handler(turn, command[1])
            return self._reply(inbound, reply)
        sender = inbound.sender_name or inbound.sender_id
        [turn.user_message_id] = self.store.append(
            chat.id, [NewMessage("user", inbound.text, sender=sender)]
        )
        if not inbound.respond:
            return None
        for extension in self.extensions:
            answer = await extension.intercept(turn)
            if answer is not None:
                self.store.append(chat.id, [NewMessage("assistant", answer)])
                return self._reply(inbound, answer)
        try:
            text = await self.run_model_turn(turn)
        except LLMError as exc:
            logger.warning("turn failed for chat %s: %s", chat.key, exc)
            return self._reply(inbound, user_facing_error(exc), is_error=True)
        for extension in self.extensions:
            await extension.after_turn(turn)
        return self._reply(inbound, text)

    async def run_model_turn(self, turn: TurnContext) -> str:
        """The tool loop. The turn's assistant and tool messages are stored together at the end."""
        pending: list[dict[str, Any]] = []
        completion: Completion | None = None
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
                result = await self.tools.execute(call.name, call.arguments, turn)
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
        await compact_session(self, turn, "overflow")
        plan = await plan_request(self, turn, pending, tools=tools, protect_turns=1)
        return await self._complete(turn, plan)

    async def prepare_request(
        self, turn: TurnContext, pending: list[dict[str, Any]], *, tools: bool
    ) -> RequestPlan:
        """The next request: compacted first when its estimate passes the threshold."""
        plan = await plan_request(self, turn, pending, tools=tools)
        over = plan.share > self.config.context.compaction_threshold
        if over and await compact_session(self, turn, "threshold") is not None:
            plan = await plan_request(self, turn, pending, tools=tools)
        if plan.tokens > plan.window:
            plan = await plan_request(self, turn, pending, tools=tools, protect_turns=1)
        return plan

    async def _complete(self, turn: TurnContext, plan: RequestPlan) -> Completion:
        """Send a planned request; record usage and calibrate the token estimate."""
        try:
            completion = await self.llm.complete(plan.messages, plan.tools)
        except LLMError:
            self.store.record_usage(turn.chat.id, "turn", self.llm.model, None, None, 0, ok=False)
            raise
        self.store.record_usage(
            turn.chat.id,
            "turn",
            completion.model or self.llm.model,
            completion.prompt_tokens,
            completion.completion_tokens,
            completion.latency_ms,
        )
        calibrate(
            self.store.conn,
            self.config,
            self.llm.model,
            request_chars(plan.messages, plan.tools),
            len(plan.messages),
            completion.prompt_tokens,
        )
        return completion

    async def dynamic_sections(self, turn: TurnContext) -> list[ContextSection]:
        sections: list[ContextSection] = []
        for extension in self.extensions:
            sections.extend(await extension.context_sections(turn))
        return sections

    async def build_request(
        self, turn: TurnContext, pending: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The messages for the next model call of this turn (budgeted and pruned)."""
        plan = await plan_request(self, turn, pending, tools=False)
        return plan.messages

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


def _with_clean_text(inbound: Inbound) -> Inbound:
    from dataclasses import replace

    return replace(inbound, text=clean_text(inbound.text))


def _to_new_message(entry: dict[str, Any]) -> NewMessage:
    return NewMessage(
        role=entry["role"],
        content=entry.get("content") or "",
        tool_calls=entry.get("tool_calls"),
        tool_call_id=entry.get("tool_call_id"),
    )
