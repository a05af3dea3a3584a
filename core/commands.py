"""Built-in slash commands: /start, /help, /reset."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.extensions import Command

if TYPE_CHECKING:
    from core.turn import TurnContext


async def start_command(turn: TurnContext, args: str) -> str:
    name = turn.config.agent.name
    return f"Hi, I'm {name}. I remember what matters in this chat. Send /help for commands."


async def help_command(turn: TurnContext, args: str) -> str:
    lines = [f"/{command.name} - {command.description}" for command in turn.agent.command_list()]
    return "Commands:\n" + "\n".join(lines)


async def reset_command(turn: TurnContext, args: str) -> str:
    turn.store.reset_session(turn.chat.id)
    return "Started a new session. Earlier messages stay saved and memories are kept."


def builtin_commands() -> list[Command]:
    from core.context_commands import context_commands

    return [
        Command("start", "introduce the bot", start_command),
        Command("help", "list the commands", help_command),
        Command("reset", "start a new session (history and memories are kept)", reset_command),
        *context_commands(),
    ]
