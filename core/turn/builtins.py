"""The built-in commands and tools, as an extension like any other.

Commands: /start, /help, /reset, /compact (compact now), /context (what the next
request holds) and /forgetme (delete the chat's data, `core.chat.forget_me`). Tools:
`get_current_time` and `read_tool_result`. The core's part of a chat's data, for export and
deletion, is `core.chat.data`.
"""

from __future__ import annotations

from typing import Any

from core.api import Chat, ChatDataSection, Check, Command, Extension, Tool, TurnContext
from core.chat.data import CoreChatData
from core.chat.forget_me import ForgetMe
from core.chat.media import media_checks
from core.clock import utc_now
from core.config import Config
from core.context.compaction import Compactor
from core.context.plan import RequestPlanner
from core.context.report import context_report, section_detail
from core.model.profile import load_profile
from core.storage.file_store import FileStore
from core.storage.store import SessionStore
from core.tools.results import read_tool
from core.turn.extensions import Extensions


async def get_current_time(turn: TurnContext, args: dict[str, Any]) -> str:
    """The current date and time in UTC, ISO 8601."""
    return utc_now().isoformat(timespec="seconds")


TIME_TOOL = Tool(
    "get_current_time",
    "Get the current date and time (UTC, ISO 8601).",
    get_current_time,
    read_only=True,
)


class CoreExtension(Extension):
    """/start, /help, /reset, /compact, /context and the built-in tools."""

    name = "core"

    def __init__(
        self,
        config: Config,
        store: SessionStore,
        extensions: Extensions,
        compactor: Compactor,
        planner: RequestPlanner,
        files: FileStore,
    ) -> None:
        self.config = config
        self.files = files
        self.store = store
        self.extensions = extensions
        self.compactor = compactor
        self.planner = planner
        self.data = CoreChatData(config, store, files)
        self.forget_me = ForgetMe(store, extensions)

    def tools(self) -> list[Tool]:
        return [TIME_TOOL, read_tool(self.config, self.files)]

    async def checks(self) -> list[Check]:
        """Images and voice (`core.chat.media`): what the model sees, whether voice is heard."""
        vision = load_profile(self.store, self.config.llm.model).vision
        return media_checks(self.config, vision)

    def commands(self) -> list[Command]:
        return [
            Command("start", "introduce the bot", self.start_command),
            Command("help", "list the commands", self.help_command),
            Command(
                "reset", "start a new session (history and memories are kept)", self.reset_command
            ),
            Command(
                "compact", "summarise older messages now (nothing is deleted)", self.compact_command
            ),
            Command(
                "context",
                "show what the next model request holds (/context KEY: one section in full)",
                self.context_command,
                private=True,
            ),
            self.forget_me.command(),
        ]

    def chat_data(self, chat: Chat) -> dict[str, int]:
        return self.data.counts(chat)

    def export_chat(self, chat: Chat) -> list[ChatDataSection]:
        return self.data.export(chat)

    def forget_chat(self, chat: Chat) -> dict[str, int]:
        return self.data.forget(chat)

    async def start_command(self, turn: TurnContext, args: str) -> str:
        name = self.config.agent.name
        return f"Hi, I'm {name}. I remember what matters in this chat. Send /help for commands."

    async def help_command(self, turn: TurnContext, args: str) -> str:
        commands = self.extensions.command_list()
        text = "Commands:\n" + "\n".join(f"/{c.name} - {c.description}" for c in commands)
        said = self.extensions.help_lines()
        return text + ("\n\nYou can also say:\n" + "\n".join(said) if said else "")

    async def reset_command(self, turn: TurnContext, args: str) -> str:
        self.store.reset_session(turn.chat.id)
        return "Started a new session. Earlier messages stay saved and memories are kept."

    async def compact_command(self, turn: TurnContext, args: str) -> str:
        result = await self.compactor.compact(turn, "command")
        if result is None:
            return "Nothing to compact yet: the session is shorter than what is kept verbatim."
        head = (
            f"Compacted {result.messages_compacted} messages: ~{result.tokens_before} -> "
            f"~{result.tokens_after} tokens of history."
        )
        if result.status == "fallback":
            archive = self.files.location(result.archive_path)
            return (
                f"{head} Summarising failed ({result.error}); the previous summary is kept and "
                f"only recent messages are sent. Full transcript archived at {archive}."
            )
        return f"{head}\n\nSummary:\n{result.summary}"

    async def context_command(self, turn: TurnContext, args: str) -> str:
        """/context: the next request's parts; /context KEY: one section in full."""
        sections = await self.extensions.context_sections(turn)
        if args.strip():
            return section_detail(self.planner, turn.chat, sections, args)
        notes = self.extensions.report_lines(turn.chat)
        return context_report(self.planner, turn.chat, sections, notes).render()
