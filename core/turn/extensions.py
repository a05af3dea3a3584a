"""The extensions of one bot and what they contribute: tools, commands, context, hooks.

`Extensions` is the registry the turn loop talks to; it calls each extension's hooks in
registration order (the built-ins first, see `core.turn.hooks`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from core.api import (
    Chat,
    ChatDataSection,
    Check,
    Command,
    ContextSection,
    Extension,
    Service,
    TurnContext,
)
from core.tools.registry import ToolRegistry

logger = logging.getLogger(__name__)


class Extensions:
    """Every registered extension; tools and commands are collected as they are added."""

    def __init__(self) -> None:
        self._items: list[Extension] = []
        self.tools = ToolRegistry()
        self._commands: dict[str, Command] = {}

    def add(self, extension: Extension) -> None:
        self._items.append(extension)
        for tool in extension.tools():
            self.tools.register(tool)
        for source in extension.tool_sources():
            self.tools.add_source(source)
        for command in extension.commands():
            self._commands[command.name] = command

    def __iter__(self) -> Iterator[Extension]:
        return iter(list(self._items))

    def command(self, name: str) -> Command | None:
        return self._commands.get(name)

    def command_list(self) -> list[Command]:
        return sorted(self._commands.values(), key=lambda command: command.name)

    async def start(self) -> None:
        for extension in self._items:
            await extension.start()

    async def context_sections(self, turn: TurnContext) -> list[ContextSection]:
        sections: list[ContextSection] = []
        for extension in self._items:
            sections.extend(await extension.context_sections(turn))
        return sections

    async def intercept(self, turn: TurnContext) -> str | None:
        for extension in self._items:
            answer = await extension.intercept(turn)
            if answer is not None:
                return answer
        return None

    async def after_turn(self, turn: TurnContext) -> None:
        for extension in self._items:
            await extension.after_turn(turn)

    async def before_compaction(self, turn: TurnContext, up_to: int) -> bool:
        """Let every extension save what it needs (facts) from the messages up to `up_to`
        before detail is summarised; True when every one did (one that raises did not)."""
        saved = True
        for extension in self._items:
            try:
                saved = await extension.before_compaction(turn, up_to) and saved
            except Exception:
                logger.exception("before_compaction of %s failed", extension.name)
                saved = False
        return saved

    def help_lines(self) -> list[str]:
        return [line for extension in self._items for line in extension.help_lines()]

    def services(self) -> list[Service]:
        return [service for extension in self._items for service in extension.services()]

    async def checks(self) -> list[Check]:
        found: list[Check] = []
        for extension in self._items:
            found.extend(await extension.checks())
        return found

    def report_lines(self, chat: Chat) -> list[str]:
        return [line for extension in self._items for line in extension.report_lines(chat)]

    def chat_data(self, chat: Chat) -> dict[str, int]:
        """What every extension keeps about `chat`: {kind: how many}, kinds with none left out."""
        found: dict[str, int] = {}
        for extension in self._items:
            for kind, count in extension.chat_data(chat).items():
                found[kind] = found.get(kind, 0) + count
        return {kind: count for kind, count in found.items() if count}

    def export_chat(self, chat: Chat) -> list[ChatDataSection]:
        return [section for extension in self._items for section in extension.export_chat(chat)]

    def forget_chat(self, chat: Chat) -> dict[str, int]:
        """Every extension deletes its part, the last registered first: the built-ins,
        which own the chat row everything else refers to, go last."""
        gone: dict[str, int] = {}
        for extension in reversed(self._items):
            for kind, count in extension.forget_chat(chat).items():
                gone[kind] = gone.get(kind, 0) + count
        return gone
