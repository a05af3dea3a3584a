"""What every package's `mnemo` subcommands share, and the core's own: `mnemo inspect`.

The root group's context object (`bots.cli.Context`) gives the loaded config and builds
a runtime on demand; subcommands reach it through `RuntimeSource`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import click

if TYPE_CHECKING:  # imported where used: `mnemo --help` loads this module, and nothing heavy
    from core.api import Chat
    from core.config import Config
    from core.context.plan import RequestPlanner
    from core.context.report import ContextReport
    from core.storage.store import SessionStore
    from core.turn.extensions import Extensions


class Runtime(Protocol):
    """The running bot's parts that subcommands use (`bots.runtime.Runtime`)."""

    @property
    def config(self) -> Config: ...

    @property
    def store(self) -> SessionStore: ...

    @property
    def extensions(self) -> Extensions: ...

    @property
    def planner(self) -> RequestPlanner: ...

    async def start(self) -> None: ...

    def close(self) -> None: ...


class RuntimeSource(Protocol):
    """What the root `mnemo` group puts in `ctx.obj`."""

    @property
    def config(self) -> Config: ...

    def runtime(self) -> Runtime: ...


def current_source() -> RuntimeSource:
    source: RuntimeSource = click.get_current_context().find_root().obj
    return source


def current_config() -> Config:
    """The config the root `mnemo` group loaded (from --config, $MNEMO_CONFIG, …)."""
    return current_source().config


def bench_group(cli: click.Group) -> click.Group:
    """The `mnemo bench` group, where plugins add their benchmarks."""
    group = cli.commands["bench"]
    assert isinstance(group, click.Group)
    return group


def chat_param(store: SessionStore, key: str, *, create: bool = False) -> Chat:
    """`resolve_chat` for a `--chat` option: a bad key is a usage error naming the known ones."""
    from core.chat.keys import resolve_chat
    from core.errors import InputError

    try:
        return resolve_chat(store, key, create=create)
    except InputError as exc:
        raise click.BadParameter(str(exc), param_hint="--chat") from None


async def inspect_chat(runtime: Runtime, key: str) -> ContextReport:
    """The context report of the chat `key` (its next request, planned without the model)."""
    from core.api import Inbound, TurnContext
    from core.chat.keys import is_control_chat, resolve_chat
    from core.context.report import context_report

    await runtime.start()
    chat = resolve_chat(runtime.store, key)
    last_user = next(
        (m.content for m in reversed(runtime.store.history(chat.id)) if m.role == "user"), ""
    )
    inbound = Inbound(chat.channel, chat.external_chat_id, last_user, chat_kind="private")
    turn = TurnContext(chat, inbound, is_control_chat(runtime.config, chat))
    sections = await runtime.extensions.context_sections(turn)
    return context_report(runtime.planner, chat, sections, runtime.extensions.report_lines(chat))


@click.command("inspect")
@click.argument("chat")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def inspect_command(chat: str, as_json: bool) -> None:
    """Show what CHAT's next request holds (CHAT is channel:chat_id, e.g. terminal:local)."""
    import asyncio
    import json

    from core.errors import InputError

    runtime = current_source().runtime()
    try:
        report = asyncio.run(inspect_chat(runtime, chat))
    except InputError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        runtime.close()
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.render())
