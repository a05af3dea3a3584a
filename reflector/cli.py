"""The reflector's CLI: `mnemo reflect --once` and `mnemo reflector` (a worker).

Heavy imports happen inside the commands so `mnemo --help` stays fast.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

import click

from core.cli.runtime import chat_param, current_config

if TYPE_CHECKING:
    from core.config import Config
    from reflector.reflection import Reflector


@contextmanager
def open_reflector(config: Config) -> Iterator[Reflector]:
    """A Reflector on its own connection (SQLite) or pool (PostgreSQL) to the configured
    database."""
    from core.model.client import OpenAILLM
    from core.storage.engine import open_storage
    from reflector.stores import build_reflector

    storage = open_storage(config.storage)
    try:
        yield build_reflector(config, storage, OpenAILLM(config.llm))
    finally:
        storage.close()


@click.command("reflect")
@click.option("--once", is_flag=True, help="Run one pass now and print what it did.")
@click.option("--runs", "list_runs", is_flag=True, help="List the newest runs instead.")
@click.option("--chat", "chat", default=None, help="Only this chat (id or channel:chat_id).")
def reflect(once: bool, list_runs: bool, chat: str | None) -> None:
    """Distil facts from unseen messages into memories (one pass), or list past runs."""
    if list_runs:
        _print_runs(chat)
        return
    if not once:
        raise click.UsageError(
            "use --once for one pass, --runs to list past runs,"
            " or `mnemo reflector` to run on a schedule"
        )
    with open_reflector(current_config()) as reflector:
        chat_ids = [chat_param(reflector.store, chat).id] if chat else None
        report = asyncio.run(reflector.run_pass(chat_ids))
    for line in report.lines():
        click.echo(line)
    if not report.ok:
        sys.exit(1)


def _print_runs(chat: str | None, limit: int = 20) -> None:
    """The newest runs, newest first; skipped batches marked as warnings."""
    with open_reflector(current_config()) as reflector:
        chat_id = chat_param(reflector.store, chat).id if chat else None
        rows = reflector.runs.recent(chat_id, limit)
    for row in rows:
        click.echo(f"WARNING: {row.summary()}" if row.status == "skipped" else row.summary())
    if not rows:
        click.echo("no reflector run yet")


@click.command("reflector")
def reflector_worker() -> None:
    """Run the reflector on its schedule, alone (beside bot processes on the same database)."""
    from core.storage.pg_db import redact_url

    config = current_config()
    storage = config.storage
    where = redact_url(storage.url) if storage.engine == "postgresql" else storage.database_path
    with open_reflector(config) as reflector:
        click.echo(
            f"reflector: every {config.reflector.interval_mins:g} min on {where}; Ctrl-C to stop",
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
