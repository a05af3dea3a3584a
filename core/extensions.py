"""How memory, the reflector and strategies plug into the turn loop without the core knowing them.

An `Extension` may contribute tools, slash commands, dynamic-context sections, an
`intercept` that answers a message without a model call (e.g. `remember: …`),
background services (the reflector scheduler) and `mnemo doctor` checks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from core.doctor import Check
    from core.tools import Tool
    from core.turn import TurnContext

CommandHandler = Callable[["TurnContext", str], Awaitable[str]]


@dataclass(frozen=True)
class Command:
    """A slash command: `/name args`. The handler returns the reply text."""

    name: str
    description: str
    handler: CommandHandler


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


class Service(Protocol):
    """A background job (e.g. the reflector scheduler) that runs until cancelled."""

    name: str

    async def run(self) -> None: ...


class Extension:
    """Base class with no-op defaults; override what the extension provides."""

    name = "extension"

    def tools(self) -> list[Tool]:
        return []

    def commands(self) -> list[Command]:
        return []

    async def context_sections(self, turn: TurnContext) -> list[ContextSection]:
        return []

    async def intercept(self, turn: TurnContext) -> str | None:
        """Answer the message without the model, or return None to go on."""
        return None

    async def after_turn(self, turn: TurnContext) -> None:
        """Called after a turn's messages are stored."""

    async def before_compaction(self, turn: TurnContext) -> None:
        """Called before the chat's history is summarised (the reflector saves facts first)."""

    def services(self) -> list[Service]:
        """Background jobs that `mnemo run` starts."""
        return []

    async def checks(self) -> list[Check]:
        """Lines for `mnemo doctor`."""
        return []
