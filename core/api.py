"""The turn API: what channels, extensions, tools and commands see of the core.

Plain data and protocols only. This module imports nothing from core but errors and
events, so every package can build on it and the turn orchestrator (`core.turn.agent`) never
has to be imported to write a tool, a command or an extension.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.events import (
    Attachment,
    Channel,
    ChatKind,
    Handler,
    Inbound,
    Outbound,
    StoreFirst,
    StreamingChannel,
    streams,
)

__all__ = [
    "Attachment",
    "Channel",
    "Chat",
    "ChatDataSection",
    "ChatKind",
    "Check",
    "Command",
    "CommandHandler",
    "CommandOption",
    "ContextSection",
    "Extension",
    "Handler",
    "Inbound",
    "Outbound",
    "Service",
    "StoreFirst",
    "StreamingChannel",
    "Tool",
    "ToolFunction",
    "TurnContext",
    "split_chat_key",
    "streams",
]

QUERY_CHARS = 500


@dataclass(frozen=True)
class Chat:
    """A conversation as the database knows it: its row id and the platform's id of it."""

    id: int
    channel: str
    external_chat_id: str
    title: str
    kind: str

    @property
    def key(self) -> str:
        """`channel:chat_id`, the name operators use (`mnemo inspect telegram:42`)."""
        return f"{self.channel}:{self.external_chat_id}"


def split_chat_key(key: str) -> tuple[str, str] | None:
    """`channel:chat_id` → (channel, chat_id), split at the first colon (so
    `telegram:-100123:42` is topic 42 of a group); None when either part is missing."""
    channel, sep, chat_id = key.strip().partition(":")
    if not sep or not channel or not chat_id:
        return None
    return channel, chat_id


@dataclass(frozen=True)
class TurnContext:
    """What a tool, command or extension hook knows about the message being handled."""

    chat: Chat
    inbound: Inbound
    is_control_chat: bool = False
    user_message_id: int = 0  # 0 until the message is stored (commands are not stored)
    tool_call_id: str = ""  # inside a tool call: the model's id of that call
    # The context items the reply cited (`[s12]` markers, `core.turn.citations`), for
    # `after_turn`: strategy ids.
    cited: tuple[int, ...] = ()

    @property
    def query(self) -> str:
        """What memory is ranked against: the newest user message, last 500 chars."""
        return self.inbound.text[-QUERY_CHARS:]


CommandHandler = Callable[[TurnContext, str], Awaitable[str]]
# (the chat, what the user typed so far) → up to 25 (value, label) pairs; reads only.
Suggester = Callable[[Chat, str], list[tuple[str, str]]]


@dataclass(frozen=True)
class CommandOption:
    """The one argument (`args`) a command takes, for platforms with typed commands
    (Discord's slash commands): its name, help, and suggestions as the user types."""

    name: str
    description: str
    required: bool = False
    suggest: Suggester | None = None


@dataclass(frozen=True)
class Command:
    """A chat command: `/name args`. The handler returns the reply text.

    `option` describes `args` (None: the command takes none); `private` replies are
    shown only to the asker where the platform can (Discord's ephemeral replies)."""

    name: str
    description: str
    handler: CommandHandler
    option: CommandOption | None = None
    private: bool = False


@dataclass(frozen=True)
class ContextSection:
    """One block of the dynamic context (file memory, memories, strategies, …).

    Higher `priority` is kept longer when the budget is tight; `protected` sections are
    never cut.
    """

    key: str
    source: str
    text: str
    priority: int = 50
    protected: bool = False
    # Evidence shown by `/context KEY`: the scope it comes from (chat, channel, global, …)
    # and why it was included (ranking, state, request focus).
    scope: str = ""
    reason: str = ""


ToolFunction = Callable[[TurnContext, dict[str, Any]], Awaitable[str]]


@dataclass(frozen=True)
class Tool:
    """A function the model may call: one async function with a JSON-schema signature.

    `read_only`: calling it changes nothing (no writes, no messages, no schedules), so a
    sub-agent may be given it; unknown tools are assumed to have side effects.
    `reads_memory`: it reads the chat's memory (notes, facts), which a sub-agent inherits
    only when `[subagents] memory` says so."""

    name: str
    description: str
    function: ToolFunction
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    read_only: bool = False
    reads_memory: bool = False
    # Offered on every request, even when a small window offers only the likely tools
    # (`core.context.tool_offer`): the memory tools.
    essential: bool = False

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True)
class Check:
    """One line of `mnemo doctor`."""

    name: str
    ok: bool
    detail: str
    fatal: bool = True  # a failed fatal check means the platform cannot work

    def line(self) -> str:
        mark = "ok  " if self.ok else ("FAIL" if self.fatal else "warn")
        return f"[{mark}] {self.name}: {self.detail}"


@dataclass(frozen=True)
class ChatDataSection:
    """One kind of data kept about a chat, in full: a part of `mnemo chat export`.

    `records` are JSON-ready dicts (oldest first); `markdown` says the same for people.
    """

    key: str
    title: str
    records: list[dict[str, Any]]
    markdown: str


class ToolSource(Protocol):
    """Tools that come and go while the bot runs (MCP servers), asked on every turn."""

    def tools_for(self, chat: Chat) -> list[Tool]:
        """The tools `chat` may call now."""
        ...

    def why_missing(self, chat: Chat, name: str) -> str:
        """Why `name` is not callable in `chat` ("" when this source does not know it)."""
        ...


class Service(Protocol):
    """A background job (e.g. the reflector scheduler) that runs until cancelled."""

    name: str

    async def run(self) -> None: ...


class Extension:
    """What a package plugs into the turn loop; override what it provides.

    The built-in commands and tools, memory, learned strategies and the reflector are
    all extensions, registered the same way (see `core.turn.hooks`).
    """

    name = "extension"

    async def start(self) -> None:
        """Prepare before the first turn (load a model, export it): called once, explicitly."""

    def tools(self) -> list[Tool]:
        return []

    def tool_sources(self) -> list[ToolSource]:
        """Sources of tools that change at run time (asked each turn, per chat)."""
        return []

    def commands(self) -> list[Command]:
        return []

    async def context_sections(self, turn: TurnContext) -> list[ContextSection]:
        """Blocks for the next request. A read: it must change nothing."""
        return []

    async def intercept(self, turn: TurnContext) -> str | None:
        """Answer the message without the model, or return None to go on."""
        return None

    async def after_turn(self, turn: TurnContext) -> None:
        """Called after a turn's reply is stored."""

    async def before_compaction(self, turn: TurnContext, up_to: int) -> bool:
        """Called before the chat's messages up to id `up_to` are summarised (the reflector
        saves their facts first). False: what this extension needs from them is not saved
        yet, and the compaction is held back while the window has room
        (`core.context.compaction`)."""
        return True

    def help_lines(self) -> list[str]:
        """What people can say besides commands (`remember: …`), one line each, for /help."""
        return []

    def services(self) -> list[Service]:
        """Background jobs that `mnemo run` starts."""
        return []

    async def checks(self) -> list[Check]:
        """Lines for `mnemo doctor`."""
        return []

    def report_lines(self, chat: Chat) -> list[str]:
        """Lines for `/context` and `mnemo inspect` about `chat` beyond the next request
        (e.g. recent sub-agent runs, with their provenance). A read: it must change nothing."""
        return []

    def chat_data(self, chat: Chat) -> dict[str, int]:
        """What this extension keeps about `chat`, as {kind: how many}: what `/forgetme`
        and `mnemo chat delete` list before deleting. A read: it must change nothing."""
        return {}

    def export_chat(self, chat: Chat) -> list[ChatDataSection]:
        """Everything this extension keeps about `chat`, for `mnemo chat export`. A read."""
        return []

    def forget_chat(self, chat: Chat) -> dict[str, int]:
        """Delete everything this extension keeps about `chat` (its rows through its own
        store, its files); return {kind: how many went}. Extensions forget in reverse
        registration order, so the built-ins (the chat row itself) go last."""
        return {}
