"""Scheduled tasks in real `mnemo run` processes, against the fake Bot API that forgets
confirmed updates and the fake model: a reminder asked for in the chat is delivered once;
after a kill -9 before it falls due and a restart, still once; and two processes on one
PostgreSQL database fire each task once. On both engines where it applies."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.bench.fakes.fake_telegram import FakeTelegramServer, user
from core.config import StorageConfig
from core.storage.engine import open_storage
from core.tasks.bench import run_fleet
from core.tasks.task_store import ScheduledTask, TaskStore
from tests.bots.test_durability import ConfirmingTelegram
from tests.conftest import launch_mnemo, start_mnemo, write_config

CHAT = 301
REMINDER = "⏰ Reminder: stretch your legs"


class SchedulingModel:
    """Asks for `schedule_task` when told to remind, then says it did."""

    def __init__(self, when: str) -> None:
        self.when = when

    def __call__(self, request: dict[str, Any]) -> FakeReply:
        last = request["messages"][-1]
        if last["role"] == "tool":
            return FakeReply(content=f"Done: {str(last['content'])[:60]}")
        arguments = {"when": self.when, "text": "stretch your legs"}
        return FakeReply(tool_calls=[tool_call("schedule_task", arguments)])


@pytest.fixture
def tg() -> Iterator[ConfirmingTelegram]:
    with ConfirmingTelegram() as server:
        yield server


def config_for(tmp_path: Path, llm: FakeOpenAIServer, tg: FakeTelegramServer, url: str) -> Path:
    extra = (f'url = "{url}"\n' if url else "") + (
        "[terminal]\nenabled = false\n[reflector]\nenabled = false\n"
        f'[telegram]\ntoken = "1:TEST"\napi_base_url = "{tg.base_url}"\n'
    )
    return write_config(tmp_path / "config.toml", llm.base_url, tmp_path / "data", extra)


def texts(tg: FakeTelegramServer) -> list[str]:
    return [str(p["text"]) for p in tg.sent() if int(str(p["chat_id"])) == CHAT]


def ask_for_reminder(tg: FakeTelegramServer) -> None:
    private = {"id": CHAT, "type": "private", "first_name": "Ann"}
    tg.push_message(private, user(CHAT, "Ann"), "remind me to stretch my legs")


def stop(process: subprocess.Popen[str], how: signal.Signals = signal.SIGTERM) -> str:
    process.send_signal(how)
    return process.communicate(timeout=60)[1]


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest) -> str:
    if request.param == "sqlite":
        return ""
    return str(request.getfixturevalue("fresh_postgres_url"))


def test_a_reminder_due_in_2_s_is_delivered_once(
    tmp_path: Path, tg: ConfirmingTelegram, url: str
) -> None:
    with FakeOpenAIServer(responder=SchedulingModel("in 2 seconds")) as llm:
        process = start_mnemo(["run"], config_for(tmp_path, llm, tg, url), tmp_path)
        try:
            tg.wait_for(lambda s: bool(s.sent("getUpdates")), timeout=120)
            ask_for_reminder(tg)
            tg.wait_for(lambda s: any(t.startswith("Done: scheduled") for t in texts(s)), 60)
            asked = time.monotonic()
            tg.wait_for(lambda s: REMINDER in texts(s), timeout=30)
            took = time.monotonic() - asked
            time.sleep(1.5)  # room for a duplicate, were there one
        finally:
            stderr = stop(process)
    assert process.returncode == 0, stderr
    assert texts(tg).count(REMINDER) == 1
    assert took < 4  # due 2 s after it was scheduled


def test_kill_9_before_it_falls_due_then_a_restart_delivers_it_once(
    tmp_path: Path, tg: ConfirmingTelegram
) -> None:
    with FakeOpenAIServer(responder=SchedulingModel("in 6 seconds")) as llm:
        config = config_for(tmp_path, llm, tg, "")
        process = start_mnemo(["run"], config, tmp_path)
        try:
            tg.wait_for(lambda s: bool(s.sent("getUpdates")), timeout=120)
            ask_for_reminder(tg)
            tg.wait_for(lambda s: any(t.startswith("Done: scheduled") for t in texts(s)), 60)
        finally:
            stop(process, signal.SIGKILL)
        assert REMINDER not in texts(tg)
        time.sleep(max(0.0, due_at(tmp_path) - time.time()) + 0.5)  # due while the bot is down
        process = start_mnemo(["run"], config, tmp_path)
        try:
            tg.wait_for(lambda s: REMINDER in texts(s), timeout=120)
            time.sleep(1.5)
        finally:
            stderr = stop(process)
    assert process.returncode == 0, stderr
    assert texts(tg).count(REMINDER) == 1
    (task,) = every_task(tmp_path)
    assert (task.status, task.runs) == ("done", 1)


def every_task(tmp_path: Path) -> list[ScheduledTask]:
    storage = open_storage(StorageConfig(data_dir=tmp_path / "data"))
    try:
        return TaskStore(storage.database).every_task(open_only=False)
    finally:
        storage.close()


def due_at(tmp_path: Path) -> float:
    """When the one task falls due (epoch seconds)."""
    (task,) = every_task(tmp_path)
    assert task.next_run_at is not None
    return task.next_run_at


def test_two_processes_on_one_postgresql_fire_each_task_once(fresh_postgres_url: str) -> None:
    setup = {"tasks": 40, "spread_s": 4.0, "chats": 8, "timeout_s": 60.0}
    result = run_fleet("postgresql", 2, fresh_postgres_url, setup, launch=launch_mnemo)
    assert (result["delivered"], result["duplicates"]) == (40, 0)
    assert result["lateness_p95_s"] < 2.0
