"""(c) A reflector pass against a real server completes and moves the chat's cursor."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.api import Inbound
from core.bench.fakes.llama_server import LlamaServer
from core.storage.database import SqliteDatabase
from core.storage.db import connect
from core.storage.session_store import DatabaseSessionStore
from reflector.state_store import DatabaseCursorStore, DatabaseRunStore
from tests.conftest import run_mnemo
from tests.real.conftest import RuntimeFactory, write_real_config

pytestmark = pytest.mark.real

MESSAGES = (
    "Hi! I'm Marta, I live in Lisbon and I work as a nurse on night shifts.",
    "My daughter Inês starts school in September; I need to buy her books.",
    "I'm vegetarian, so please never suggest recipes with meat or fish.",
    "remember: my car is a red Fiat Panda from 2012",
)


async def test_one_reflector_pass_moves_the_cursor(
    default_server: LlamaServer, real_runtime: RuntimeFactory, tmp_path: Path
) -> None:
    async with real_runtime(default_server) as runtime:
        for text in MESSAGES:
            reply = await runtime.dispatcher(Inbound("terminal", "local", text))
            assert reply is not None and not reply.is_error, reply
    # The default answer budget (a quarter of the window): the reflector's JSON needs room.
    config = write_real_config(
        tmp_path / "config.toml", default_server, tmp_path / "data", max_output_tokens=2048
    )

    result = run_mnemo(["reflect", "--once"], config, timeout=900)

    conn = connect(tmp_path / "data" / "mnemo.db")
    try:
        chat = DatabaseSessionStore(SqliteDatabase(conn)).get_or_create_chat("terminal", "local")
        newest = DatabaseSessionStore(SqliteDatabase(conn)).newest_message_id(chat.id)
        position = DatabaseCursorStore(SqliteDatabase(conn)).position(chat.id)
        runs = DatabaseRunStore(SqliteDatabase(conn)).recent(chat.id)
    finally:
        conn.close()
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, f"{result.stdout}{result.stderr}"
    assert runs and runs[0].status == "done", f"pass said {result.stdout!r}; runs {runs}"
    assert position == newest, f"cursor at {position} of {newest}; pass said {result.stdout!r}"
