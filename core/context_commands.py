"""The context commands: /compact (compact now) and /context (what the next request holds),
and the `mnemo inspect CHAT [--json]` CLI command."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Protocol

import click

from core.compaction import compact_session
from core.errors import MnemoError
from core.events import Inbound
from core.extensions import Command
from core.inspect import ContextReport, context_report

if TYPE_CHECKING:
    from core.turn import Agent, TurnContext


async def compact_command(turn: TurnContext, args: str) -> str:
    result = await compact_session(turn.agent, turn, "command")
    if result is None:
        return "Nothing to compact yet: the session is shorter than what is kept verbatim."
    head = (
        f"Compacted {result.messages_compacted} messages: ~{result.tokens_before} -> "
        f"~{result.tokens_after} tokens of history."
    )
    if result.status == "fallback":
        return (
            f"{head} Summarising failed ({result.error}); the previous summary is kept and "
            f"only recent messages are sent. Full transcript archived at {result.archive_path}."
        )
    return f"{head}\n\nSummary:\n{result.summary}"


async def context_command(turn: TurnContext, args: str) -> str:
    return (await context_report(turn.agent, turn)).render()


def context_commands() -> list[Command]:
    return [
        Command("compact", "summarise older messages now (nothing is deleted)", compact_command),
        Command("context", "show what the next model request holds", context_command),
    ]


class _RuntimeLike(Protocol):
    @property
    def agent(self) -> Agent: ...

    def close(self) -> None: ...


class _RuntimeSource(Protocol):
    def runtime(self) -> _RuntimeLike: ...


async def inspect_chat(agent: Agent, key: str) -> ContextReport:
    """The context report of the chat `channel:chat_id`, or a `MnemoError` naming known ones."""
    from core.turn import TurnContext

    channel, _, external = key.partition(":")
    chat = agent.store.find_chat(channel, external) if external else None
    if chat is None:
        known = [
            f"{row[0]}:{row[1]}"
            for row in agent.store.conn.execute(
                "SELECT channel, external_chat_id FROM chats ORDER BY id LIMIT 20"
            )
        ]
        raise MnemoError(
            f"no chat {key!r} (give channel:chat_id; known: {', '.join(known) or 'none'})"
        )
    last_user = next(
        (m.content for m in reversed(agent.store.history(chat.id)) if m.role == "user"), ""
    )
    inbound = Inbound(chat.channel, chat.external_chat_id, last_user, chat_kind="private")
    return await context_report(agent, TurnContext(agent, chat, inbound))


@click.command("inspect")
@click.argument("chat")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_obj
def inspect_command(source: _RuntimeSource, chat: str, as_json: bool) -> None:
    """Show what CHAT's next request holds (CHAT is channel:chat_id, e.g. terminal:local)."""
    runtime = source.runtime()
    try:
        report = asyncio.run(inspect_chat(runtime.agent, chat))
    except MnemoError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        runtime.close()
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.render())
