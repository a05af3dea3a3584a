"""Storage: connect() settings, sqlite-vec, migrations on blank and old databases, and the
`SessionStore` contract on both engines."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from core.api import Chat
from core.config import StorageConfig
from core.model.profile import ModelProfile
from core.model.tokens import Calibration
from core.storage.database import SqliteDatabase
from core.storage.db import connect
from core.storage.engine import Storage, open_storage
from core.storage.pg_db import PgDatabase
from core.storage.session_store import DatabaseSessionStore
from core.storage.store import CompactionRecord, NewMessage
from core.storage.stores import session_store
from migrations import all_migrations, applied_names, migrate


def test_connect_sets_pragmas_and_loads_vec(tmp_path: Path) -> None:
    conn = connect(tmp_path / "m.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000
    assert conn.info.vec_loaded
    assert conn.execute("SELECT vec_length('[1, 2, 3]')").fetchone()[0] == 3
    conn.close()


def test_connect_without_vec_reports_it(tmp_path: Path) -> None:
    conn = connect(tmp_path / "m.db", load_vec=False)
    assert not conn.info.vec_loaded
    assert conn.info.vec_error
    conn.close()


def test_blank_database_gets_every_migration(tmp_path: Path) -> None:
    conn = connect(tmp_path / "m.db")
    assert applied_names(conn) == sorted(m.name for m in all_migrations())
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"chats", "messages", "sessions", "llm_usage"} <= tables
    assert migrate(conn) == []  # idempotent
    conn.close()


def test_upgrade_from_first_migration_keeps_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = connect(path, migrate=False)
    migrate(old, upto=1)
    assert applied_names(old) == ["m0001_initial"]
    store = DatabaseSessionStore(SqliteDatabase(old))
    chat = store.get_or_create_chat("terminal", "alice", "Alice", "private")
    store.append(chat.id, [NewMessage("user", "hello", "alice"), NewMessage("assistant", "hi")])
    old.close()

    upgraded = connect(path)
    assert applied_names(upgraded) == sorted(m.name for m in all_migrations())
    store = DatabaseSessionStore(SqliteDatabase(upgraded))
    again = store.find_chat("terminal", "alice")
    assert again is not None and again.id == chat.id
    assert [m.content for m in store.history(chat.id)] == ["hello", "hi"]
    upgraded.close()


def test_failed_migration_leaves_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import migrations

    conn = connect(tmp_path / "m.db", migrate=False)
    broken = migrations.Migration(9999, "m9999_broken", lambda c: c.execute("CREATE TABLE ("), None)
    monkeypatch.setattr(migrations, "all_migrations", lambda: [broken])
    with pytest.raises(Exception, match="syntax error"):
        migrate(conn)
    assert "m9999_broken" not in applied_names(conn)
    conn.close()


# -- the SessionStore contract, on both engines (`storage`, tests/core/conftest.py)


def test_transaction_rolls_back_on_error(storage: Storage) -> None:
    store = session_store(storage)
    chat = store.get_or_create_chat("terminal", "x")
    with pytest.raises(RuntimeError), store.transaction():
        store.append(chat.id, [NewMessage("user", "lost")])
        raise RuntimeError("boom")
    assert store.history(chat.id) == []


def test_chats_are_unique_per_channel_and_external_id(storage: Storage) -> None:
    store = session_store(storage)
    a = store.get_or_create_chat("telegram", "42", "Group", "group")
    b = store.get_or_create_chat("telegram", "42")
    c = store.get_or_create_chat("discord", "42")
    assert a.id == b.id and a.title == b.title == "Group"
    assert c.id != a.id
    renamed = store.get_or_create_chat("telegram", "42", "New name", "group")
    assert renamed == Chat(a.id, "telegram", "42", "New name", "group")
    assert store.find_chat("telegram", "42") == renamed == store.chat_by_id(a.id)
    assert store.find_chat("telegram", "43") is None and store.chat_by_id(10**9) is None
    assert [chat.id for chat in store.list_chats()] == [a.id, c.id]
    assert [chat.id for chat in store.list_chats(limit=1)] == [a.id]


def test_reset_starts_a_new_session_without_deleting(storage: Storage) -> None:
    store = session_store(storage)
    chat = store.get_or_create_chat("terminal", "x")
    store.append(chat.id, [NewMessage("user", "old")])
    store.reset_session(chat.id)
    store.append(chat.id, [NewMessage("user", "new")])
    assert [m.content for m in store.history(chat.id)] == ["new"]
    assert store.count_messages(chat.id) == 2


def test_messages_come_back_as_stored_in_order(storage: Storage) -> None:
    store = session_store(storage)
    chat = store.get_or_create_chat("terminal", "x")
    other = store.get_or_create_chat("terminal", "y")
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    ids = store.append(chat.id, [
        NewMessage("user", "question", sender="Ann"),
        NewMessage("assistant", "", tool_calls=[call]),
        NewMessage("tool", "result", tool_call_id="c1"),
        NewMessage("assistant", "answer"),
    ])  # fmt: skip
    store.append(other.id, [NewMessage("user", "elsewhere")])
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert store.append(chat.id, []) == []
    history = store.history(chat.id)
    assert [m.id for m in history] == ids
    assert history[0].sender == "Ann" and history[0].token_estimate > 0
    assert history[1].tool_calls == [call] and history[2].tool_call_id == "c1"
    assert history[1].to_openai() == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert [m.id for m in store.history(chat.id, after_id=ids[1])] == ids[2:]
    assert [m.id for m in store.messages_between(chat.id, ids[0], 2)] == ids[1:3]
    assert store.newest_message_id(chat.id) == ids[-1]
    assert store.newest_message_id(10**9) == 0
    assert (store.count_messages(chat.id), store.count_messages()) == (4, 5)
    store.keep_context(ids[0], "## Memories\n- tea")
    store.keep_context(ids[0], "changed later")  # the first one sent stays
    assert store.history(chat.id)[0].context == "## Memories\n- tea"
    assert store.history(chat.id)[1].context is None


def test_a_compaction_marks_its_messages_and_moves_the_session(storage: Storage) -> None:
    store = session_store(storage)
    chat = store.get_or_create_chat("terminal", "x")
    ids = store.append(chat.id, [NewMessage("user", f"m{n}") for n in range(6)])
    assert store.session(chat.id).compaction_count == 0
    record = CompactionRecord(
        "threshold", "summarised", ids[0], ids[3], 4, 900, 300, 1,
        "terminal/x/archive/one.md", "the summary",
    )  # fmt: skip
    first = store.record_compaction(chat.id, record)
    session = store.session(chat.id)
    assert (session.summary, session.compaction_count) == ("the summary", 1)
    assert session.started_at_message_id == ids[3]
    assert [m.id for m in store.history(chat.id)] == ids[4:]
    assert store.compacted_message_ids() == set(ids[:4])
    fallback = replace(record, status="fallback", summary=None, tokens_after=950,
                       first_message_id=ids[4], last_message_id=ids[4], error="x")  # fmt: skip
    second = store.record_compaction(chat.id, fallback)
    assert second > first
    assert store.session(chat.id).summary == "the summary"  # None keeps the previous one
    assert store.compaction_totals(chat.id) == (2, 600)  # a compaction that grew saves 0
    assert store.archive_paths() == ["terminal/x/archive/one.md"] * 2
    assert store.compactions(chat.id) == [
        replace(record, summary=None),
        replace(fallback, error="x"),
    ]


def test_deleting_a_chat_keeps_its_usage_without_the_chat(storage: Storage) -> None:
    store = session_store(storage)
    chat = store.get_or_create_chat("terminal", "x")
    kept = store.get_or_create_chat("terminal", "y")
    ids = store.append(chat.id, [NewMessage("user", "a"), NewMessage("assistant", "b")])
    store.append(kept.id, [NewMessage("user", "stays")])
    store.record_compaction(chat.id, CompactionRecord(
        "command", "summarised", ids[0], ids[0], 1, 10, 5, 1, "", "s"))  # fmt: skip
    store.record_usage(chat.id, "chat", "m", 10, 5, 120)
    assert store.delete_chat(chat.id) == 2
    assert store.find_chat("terminal", "x") is None
    assert store.count_messages() == 1 and store.compaction_totals(chat.id) == (0, 0)
    assert store.history(kept.id)[0].content == "stays"


def test_calibration_and_model_profiles_are_kept_per_model(storage: Storage) -> None:
    store = session_store(storage)
    assert store.load_calibration("m") is None and store.load_model_profile("m") is None
    store.save_calibration(Calibration("m", 3.5, 4, 1.1))
    store.save_calibration(Calibration("m", 3.25, 5, None))
    store.save_calibration(Calibration("other", 4.0, 1, 0.9))
    assert store.load_calibration("m") == Calibration("m", 3.25, 5, None)
    profile = ModelProfile("m", window=2048, window_source="overflow error")
    store.save_model_profile(profile)
    store.save_model_profile(replace(profile, window=4096))
    loaded = store.load_model_profile("m")
    assert loaded is not None and loaded.window == 4096
    store.record_usage(None, "discovery", "m", None, None, 5, ok=False)  # no chat: fine


def test_two_processes_see_each_others_writes(storage_url: str) -> None:
    """Two opened storages (two pools on PostgreSQL): one's commit is the other's read."""
    one = open_storage(StorageConfig(url=storage_url))
    two = open_storage(StorageConfig(url=storage_url))
    try:
        first, second = session_store(one), session_store(two)
        chat = first.get_or_create_chat("telegram", "5", "T")
        assert second.get_or_create_chat("telegram", "5") == chat
        with first.transaction():
            first.append(chat.id, [NewMessage("user", "not yet")])
            assert second.history(chat.id) == []  # uncommitted: invisible elsewhere
        assert [m.content for m in second.history(chat.id)] == ["not yet"]
    finally:
        one.close()
        two.close()


def test_doctor_names_the_engine_and_its_vector_search(storage: Storage) -> None:
    from core.cli.doctor import vector_check

    check = vector_check(storage)
    assert check.ok, check.line()
    if storage.engine == "postgresql":
        assert "(PostgreSQL 18" in storage.describe() and check.name == "pgvector"
    else:
        assert "(SQLite " in storage.describe() and check.name == "sqlite-vec"


def test_both_engines_have_the_same_columns_in_the_same_order(
    tmp_path: Path, fresh_postgres_url: str
) -> None:
    """What `mnemo storage migrate` relies on to copy table by table."""
    conn = connect(tmp_path / "m.db")
    db = PgDatabase(fresh_postgres_url)
    try:
        tables = [row[0] for row in db.read(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            " AND table_type = 'BASE TABLE' AND table_name != '_migrations' ORDER BY 1"
        )]  # fmt: skip
        assert {"chats", "messages", "memories", "reflector_runs", "stored_files"} <= set(tables)
        for table in tables:
            on_pg = [row[0] for row in db.read(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = 'public' AND table_name = %s"
                " AND is_generated = 'NEVER'"  # computed by PostgreSQL (m0025), never copied
                " ORDER BY ordinal_position",
                (table,),
            )]  # fmt: skip
            on_sqlite = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
            assert on_pg == on_sqlite, table
    finally:
        db.close()
        conn.close()


def test_every_migration_has_a_postgresql_version() -> None:
    from migrations import all_migrations

    assert [m.name for m in all_migrations() if m.apply_postgresql is None] == []
