""" "Deleted for good" leaves no bytes: after `mnemo chat delete`, `/forgetme` or `/forget`,
the database file and its write-ahead log hold no copy of the deleted text (SQLite), and the
tables were vacuumed (PostgreSQL).

The check reads the files' bytes for a marker that appears nowhere else, while a bot process
still has the database open (as `mnemo run` would), so no close-time checkpoint helps.
"""

from __future__ import annotations

import re
from pathlib import Path

from bots.runtime import Runtime, build_runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.config import Config
from core.storage.pg_db import PgDatabase
from memory.extension import MemoryExtension
from tests.conftest import make_config, run_mnemo, write_config

MARK = "zebraquartzlighthouse"
KEPT = "kestrelmarmaladeorbit"
CODE = re.compile(r"/forgetme (\d{4})")


def copies(data: Path, marker: str = MARK) -> dict[str, int]:
    """How often `marker` occurs in each of the database's files."""
    return {path.name: path.read_bytes().count(marker.encode()) for path in data.glob("mnemo.db*")}


async def say(runtime: Runtime, chat: str, text: str) -> str:
    reply = await runtime.dispatcher(Inbound("terminal", chat, text, f"u-{chat}", chat.title()))
    return reply.text if reply is not None else ""


async def alice_and_bob(config: Config) -> Runtime:
    """A bot (left open) where Alice said the marker several ways and Bob said another."""
    runtime = build_runtime(config)
    for n in range(3):
        await say(runtime, "alice", f"my locker code {n} is {MARK}{n}, keep it safe")
    await say(runtime, "alice", f"remember: my secret phrase is {MARK} lighthouse")
    await say(runtime, "bob", f"remember: my secret phrase is {KEPT}")
    return runtime


async def test_chat_delete_leaves_no_copy_in_the_file_or_the_wal(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    data = tmp_path / "data"
    runtime = await alice_and_bob(make_config(data, fake_llm.base_url))
    try:
        assert sum(copies(data).values()) > 0
        config = write_config(tmp_path / "config.toml", fake_llm.base_url, data)
        deleted = run_mnemo(["chat", "delete", "terminal:alice", "--yes"], config)
        assert deleted.returncode == 0, deleted.stderr
        assert "Deleted chat terminal:alice" in deleted.stdout
        assert copies(data) == {name: 0 for name in copies(data)}, copies(data)
        assert sum(copies(data, KEPT).values()) > 0  # Bob's chat is still there
        assert await say(runtime, "bob", "hello again")  # and the running bot works on
    finally:
        runtime.close()


async def test_forgetme_leaves_no_copy(tmp_path: Path, fake_llm: FakeOpenAIServer) -> None:
    data = tmp_path / "data"
    runtime = await alice_and_bob(make_config(data, fake_llm.base_url))
    try:
        asked = await say(runtime, "alice", "/forgetme")
        found = CODE.search(asked)
        assert found is not None, asked
        done = await say(runtime, "alice", f"/forgetme {found.group(1)}")
        assert done.startswith("Deleted everything"), done
        assert sum(copies(data).values()) == 0, copies(data)
    finally:
        runtime.close()


async def test_a_forgotten_memory_is_left_only_in_its_tombstone(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    data = tmp_path / "data"
    runtime = build_runtime(make_config(data, fake_llm.base_url))
    try:
        await say(runtime, "alice", "hello")
        chat = runtime.store.find_chat("terminal", "alice")
        assert chat is not None
        [memory] = [e for e in runtime.extensions if isinstance(e, MemoryExtension)]
        store = memory.keeper.store
        memory_id = store.add(chat.id, f"Alice's safe opens with {MARK}", "PROFILE", source="cli")
        store.update(memory_id, f"Alice's safe opens with {MARK} twice")  # an older version
        assert sum(copies(data).values()) >= 2
        store.forget(memory_id, forgotten_by="Alice")
        [tombstone] = store.tombstones(chat.id)
        assert MARK in tombstone.content  # kept on purpose: the reflector must not relearn it
        assert sum(copies(data).values()) == 1, copies(data)
    finally:
        runtime.close()


def last_vacuums(url: str, tables: tuple[str, ...]) -> dict[str, object]:
    db = PgDatabase(url, pool_size=1, migrate=False)
    try:
        db.read("SELECT pg_stat_clear_snapshot()")
        rows = db.read(
            "SELECT relname, last_vacuum FROM pg_stat_user_tables WHERE relname = ANY(%s)",
            (list(tables),),
        )
        return {str(name): when for name, when in rows}
    finally:
        db.close()


async def test_on_postgresql_a_deleted_chat_and_a_forgotten_memory_are_vacuumed(
    tmp_path: Path, fake_llm: FakeOpenAIServer, fresh_postgres_url: str
) -> None:
    config = make_config(tmp_path / "data", fake_llm.base_url)
    config.storage.url = fresh_postgres_url
    runtime = await alice_and_bob(config)
    try:
        tables = ("messages", "memories", "chats")
        assert all(when is None for when in last_vacuums(fresh_postgres_url, tables).values())
        bob = runtime.store.find_chat("terminal", "bob")
        assert bob is not None
        [memory] = [e for e in runtime.extensions if isinstance(e, MemoryExtension)]
        [fact] = memory.keeper.store.list(bob.id, include_global=False)
        memory.keeper.store.forget(fact.id, forgotten_by="Bob")
        assert last_vacuums(fresh_postgres_url, ("memories",))["memories"] is not None
        extra = f'url = "{fresh_postgres_url}"\n'
        path = write_config(tmp_path / "config.toml", fake_llm.base_url, tmp_path / "data", extra)
        deleted = run_mnemo(["chat", "delete", "terminal:alice", "--yes"], path)
        assert deleted.returncode == 0, deleted.stderr
        vacuumed = last_vacuums(fresh_postgres_url, tables)
        assert all(when is not None for when in vacuumed.values()), vacuumed
    finally:
        runtime.close()
