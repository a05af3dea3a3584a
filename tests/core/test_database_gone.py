"""A database file deleted or replaced under a running process is noticed: every write
transaction checks the file first, and `mnemo run` checks it every few seconds and stops
with one clear line, instead of writing on into a file no restart will open."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from bots.app import run_platform
from bots.runtime import build_runtime
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.config import Config
from core.errors import DatabaseGone
from core.storage.db import connect, transaction
from tests.conftest import start_mnemo, write_config


def remove_database(path: Path) -> None:
    for file in path.parent.glob(f"{path.name}*"):
        file.unlink()


def test_a_write_into_a_deleted_or_replaced_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "mnemo.db"
    conn = connect(path)
    with transaction(conn):
        conn.execute("CREATE TABLE notes (text TEXT)")
    remove_database(path)
    deleted = pytest.raises(DatabaseGone, match="was deleted while this process had it open")
    with deleted, transaction(conn):
        conn.execute("INSERT INTO notes VALUES ('lost')")
    conn.close()

    conn = connect(path)
    other = connect(tmp_path / "other.db")
    other.close()
    os.replace(tmp_path / "other.db", path)  # e.g. a copy moved into place
    with pytest.raises(DatabaseGone, match="replaced by another file"), transaction(conn):
        pass
    conn.close()


async def test_a_running_platform_stops_when_its_database_is_deleted(config: Config) -> None:
    runtime = build_runtime(config)
    try:
        running = asyncio.create_task(run_platform(runtime, [], [], file_check_s=0.05))
        await asyncio.sleep(0.2)
        assert not running.done()  # services alone: it runs until stopped
        remove_database(config.storage.database_path)
        with pytest.raises(DatabaseGone, match="was deleted"):
            await asyncio.wait_for(running, 10)
    finally:
        runtime.close()


def test_mnemo_run_says_why_it_stopped(tmp_path: Path, fake_llm: FakeOpenAIServer) -> None:
    data = tmp_path / "data"
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, data)
    bot = start_mnemo(["run"], config, tmp_path)
    try:
        assert bot.stderr is not None
        for line in bot.stderr:  # up when it says what it runs
            if "running channels" in line:
                break
        remove_database(data / "mnemo.db")
        _, err = bot.communicate(timeout=60)
    finally:
        if bot.poll() is None:
            bot.kill()
            bot.wait()
    assert bot.returncode not in (0, None) and "Traceback" not in err
    assert "mnemo.db was deleted while this process had it open" in err
