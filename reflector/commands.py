"""The reflector's CLI: `mnemo reflect --once`, `mnemo reflector` (worker), `mnemo bench reflector`.

Heavy imports happen inside the commands so `mnemo --help` stays fast. The commands get
the loaded config from the root group's context object (anything with a `.config`).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Protocol

import click

if TYPE_CHECKING:
    from core.config import Config
    from core.store import SessionStore
    from reflector.reflection import Reflector


class ConfigSource(Protocol):
    """What the root `mnemo` group puts in `ctx.obj`."""

    @property
    def config(self) -> Config: ...


@contextmanager
def open_reflector(config: Config) -> Iterator[Reflector]:
    """A Reflector on its own connection to the configured database."""
    from core.db import connect
    from core.llm import OpenAILLM
    from core.store import SessionStore
    from reflector.playbook import default_contributors
    from reflector.reflection import Reflector

    config.storage.data_dir.mkdir(parents=True, exist_ok=True)
    conn = connect(config.storage.database_path)
    try:
        llm = OpenAILLM(config.llm)
        contributors = default_contributors(conn)
        yield Reflector(config, SessionStore(conn), llm, contributors=contributors)
    finally:
        conn.close()


def resolve_chat(store: SessionStore, chat: str) -> int:
    """A chat given as its numeric id or as `channel:external_id`."""
    if chat.isdigit() and store.chat_by_id(int(chat)) is not None:
        return int(chat)
    channel, sep, external = chat.partition(":")
    found = store.find_chat(channel, external) if sep else None
    if found is None:
        raise click.BadParameter(
            f"no chat {chat!r} (give an id or channel:chat_id)", param_hint="--chat"
        )
    return found.id


@click.command("reflect")
@click.option("--once", is_flag=True, help="Run one pass now and print what it did.")
@click.option("--chat", "chat", default=None, help="Only this chat (id or channel:chat_id).")
@click.pass_obj
def reflect(obj: ConfigSource, once: bool, chat: str | None) -> None:
    """Distil facts from unseen messages into memories (one pass)."""
    if not once:
        raise click.UsageError("use --once for one pass, or `mnemo reflector` to run on a schedule")
    with open_reflector(obj.config) as reflector:
        chat_ids = [resolve_chat(reflector.store, chat)] if chat else None
        report = asyncio.run(reflector.run_pass(chat_ids))
    for line in report.lines():
        click.echo(line)
    if not report.ok:
        sys.exit(1)


@click.command("reflector")
@click.pass_obj
def reflector_worker(obj: ConfigSource) -> None:
    """Run the reflector on its schedule, alone (beside bot processes on the same database)."""
    config = obj.config
    with open_reflector(config) as reflector:
        click.echo(
            f"reflector: every {config.reflector.interval_mins:g} min on "
            f"{config.storage.database_path}; Ctrl-C to stop",
            err=True,
        )
        asyncio.run(_serve(reflector, config.reflector.interval_mins))


async def _serve(reflector: Reflector, interval_mins: float) -> None:
    """Run the scheduler service until SIGINT or SIGTERM."""
    from reflector.scheduler import ReflectorService

    service = ReflectorService(reflector, interval_mins)
    task = asyncio.create_task(service.run(), name="reflector")
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    try:
        with suppress(asyncio.CancelledError):
            await task
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


@click.command("reflector")
@click.option("--small", default=1_000, show_default=True, help="History of the small chat.")
@click.option("--large", default=100_000, show_default=True, help="History of the large chat.")
@click.option("--new", "new", default=20, show_default=True, help="New messages per pass.")
@click.option("--repeat", default=7, show_default=True, help="Passes timed per chat.")
@click.option(
    "--embed/--no-embed",
    default=True,
    show_default=True,
    help="Embed facts with the real model (off: keyword dedup only).",
)
def bench_reflector(small: int, large: int, new: int, repeat: int, embed: bool) -> None:
    """Time a pass over NEW messages in a chat with SMALL vs LARGE history (fake model)."""
    from reflector.bench import run_bench

    result = asyncio.run(run_bench(small, large, new, repeat, embed, progress=click.echo))
    for line in result.lines():
        click.echo(line)
