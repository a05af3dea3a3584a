"""`mnemo bench tasks`: N reminders due within SPREAD seconds, fired by real `mnemo run`
processes: 1 on SQLite, then `--pg-processes` on one PostgreSQL database.

Each run seeds `--chats` Telegram chats, starts the processes against the fake Bot API and
a fake model, waits until every process runs, then stores the tasks (due from 3 s on,
spread evenly). Every `sendMessage` the fake Bot API accepts is timed: delivered counts
distinct tasks, duplicates the extra sends, lateness is arrival minus due (p50, p95,
max). PostgreSQL is `--postgres-url` (an empty database) or a throwaway embedded server.
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from core.bench.chaos import Launcher, launch_mnemo, terminate
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.bench.fakes.fake_telegram import FakeTelegramServer
from core.bench.scale import postgres_databases
from core.bench.startup import write_config
from core.bench.support import echo_result
from core.config import StorageConfig
from core.storage.engine import open_storage
from core.storage.stores import session_store
from core.tasks.task_store import NewTask, TaskStore

FIRST_CHAT_ID = 5_000
LEAD_S = 3.0  # the first task is due this long after the tasks are stored
START_TIMEOUT_S = 300.0
SENT = re.compile(r"bench task (\d+) due (\d+\.\d+)")


class TimedTelegram(FakeTelegramServer):
    """The fake Bot API, noting when each message arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[tuple[float, str]] = []

    def answer(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status, body = super().answer(method, params)
        if method == "sendMessage" and status == 200:
            self.arrivals.append((time.time(), str(params.get("text", ""))))
        return status, body


def seed_tasks(url: str, data: Path, count: int, spread: float, chats: list[int]) -> float:
    """`count` reminders due from now + LEAD_S over `spread` s; when the last falls due."""
    storage = open_storage(StorageConfig(url=url, data_dir=data))
    try:
        tasks = TaskStore(storage.database)
        start = time.time() + LEAD_S
        with storage.database.transaction():
            for number in range(count):
                due = start + spread * number / max(count - 1, 1)
                tasks.add(
                    NewTask(
                        creator_id="1",
                        creator_name="bench",
                        mode="remind",
                        text=f"bench task {number} due {due:.3f}",
                        schedule_kind="date",
                        expression=time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(due)),
                        timezone="UTC",
                        chat_id=chats[number % len(chats)],
                        next_run_at=due,
                    )
                )
        return start + spread
    finally:
        storage.close()


def seed_chats(url: str, data: Path, chats: int) -> list[int]:
    """The chats' row ids (the database is migrated on the way)."""
    storage = open_storage(StorageConfig(url=url, data_dir=data))
    try:
        store = session_store(storage)
        return [
            store.get_or_create_chat("telegram", str(FIRST_CHAT_ID + n), "", "private").id
            for n in range(chats)
        ]
    finally:
        storage.close()


def wait_running(logs: list[Path], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(log.exists() and "running channels" in log.read_text() for log in logs):
            return
        time.sleep(0.2)
    raise click.ClickException(f"the bot processes did not start within {timeout:.0f} s")


def run_fleet(
    engine: str, processes: int, url: str, setup: dict[str, Any], launch: Launcher = launch_mnemo
) -> dict[str, Any]:
    """One engine's run: its figures. `launch` starts each `mnemo run` (the tests fork theirs
    from a warm process: the start is not what they check)."""
    with (
        tempfile.TemporaryDirectory(prefix="mnemo-bench-tasks-") as tmp,
        FakeOpenAIServer() as llm,
        TimedTelegram() as telegram,
    ):
        work = Path(tmp)
        data = work / "data"
        chats = seed_chats(url, data, setup["chats"])
        extra = (f'url = "{url}"\n' if url else "") + (
            "[terminal]\nenabled = false\n[reflector]\nenabled = false\n"
            f'[telegram]\ntoken = "1:BENCH"\napi_base_url = "{telegram.base_url}"\n'
        )
        bots, logs = [], []
        for number in range(processes):
            config = write_config(work / f"bot{number}.toml", llm.base_url, data, extra)
            logs.append(work / f"bot{number}.log")
            bots.append(launch(config, "run", logs[-1], work))
        try:
            wait_running(logs, START_TIMEOUT_S)
            last_due = seed_tasks(url, data, setup["tasks"], setup["spread_s"], chats)
            deadline = last_due + setup["timeout_s"]
            while len(telegram.arrivals) < setup["tasks"] and time.time() < deadline:
                time.sleep(0.2)
            time.sleep(2.0)  # room for a duplicate to show, were there one
        finally:
            for bot in bots:
                terminate(bot, timeout_s=30)
        return {"engine": engine, "processes": processes, **figures(telegram.arrivals)}


def figures(arrivals: list[tuple[float, str]]) -> dict[str, Any]:
    first: dict[int, float] = {}
    sends = 0
    for arrived, text in arrivals:
        found = SENT.search(text)
        if not found:
            continue
        sends += 1
        number, due = int(found.group(1)), float(found.group(2))
        first.setdefault(number, arrived - due)
    late = sorted(first.values())
    return {
        "delivered": len(first),
        "duplicates": sends - len(first),
        "lateness_p50_s": round(statistics.median(late), 3) if late else None,
        "lateness_p95_s": round(late[int(0.95 * (len(late) - 1))], 3) if late else None,
        "lateness_max_s": round(late[-1], 3) if late else None,
    }


@click.command("tasks")
@click.option("--n", "count", default=1000, show_default=True, type=click.IntRange(1))
@click.option("--spread", default=60.0, show_default=True, type=click.FloatRange(0),
              help="Seconds over which the tasks fall due.")  # fmt: skip
@click.option("--chats", default=50, show_default=True, type=click.IntRange(1))
@click.option("--pg-processes", default=2, show_default=True, type=click.IntRange(1))
@click.option("--postgres-url", default=None, help="An empty PostgreSQL database to use.")
@click.option("--timeout", default=120.0, show_default=True, type=click.FloatRange(1),
              help="How long after the last due time to wait for deliveries.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_tasks(
    count: int,
    spread: float,
    chats: int,
    pg_processes: int,
    postgres_url: str | None,
    timeout: float,
    as_json: bool,
) -> None:
    """N tasks due within SPREAD seconds, fired by 2 processes on PostgreSQL and 1 on SQLite:
    delivered, duplicates, lateness p50/p95."""
    setup = {"tasks": count, "spread_s": spread, "chats": chats, "timeout_s": timeout}
    click.echo("sqlite × 1 …", err=True)
    runs = [run_fleet("sqlite", 1, "", setup)]
    with postgres_databases(postgres_url) as new_database:
        click.echo(f"postgresql × {pg_processes} …", err=True)
        runs.append(run_fleet("postgresql", pg_processes, new_database(), setup))
    result = {**setup, "runs": runs}
    echo_result(result, as_json, lambda: lines(result))


def lines(result: dict[str, Any]) -> list[str]:
    head = f"{result['tasks']} tasks due within {result['spread_s']:.0f} s"
    return [head] + [
        f"{r['engine']:10} × {r['processes']}: {r['delivered']} delivered,"
        f" {r['duplicates']} duplicates, late p50 {r['lateness_p50_s']} s,"
        f" p95 {r['lateness_p95_s']} s, max {r['lateness_max_s']} s"
        for r in result["runs"]
    ]
