"""Storage: connect() settings, sqlite-vec, migrations on blank and old databases."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.db import connect, transaction
from core.sqlite_store import SqliteSessionStore
from core.store import NewMessage
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
    store = SqliteSessionStore(old)
    chat = store.get_or_create_chat("terminal", "alice", "Alice", "private")
    store.append(chat.id, [NewMessage("user", "hello", "alice"), NewMessage("assistant", "hi")])
    old.close()

    upgraded = connect(path)
    assert applied_names(upgraded) == sorted(m.name for m in all_migrations())
    store = SqliteSessionStore(upgraded)
    again = store.find_chat("terminal", "alice")
    assert again is not None and again.id == chat.id
    assert [m.content for m in store.history(chat.id)] == ["hello", "hi"]
    upgraded.close()


def test_failed_migration_leaves_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import migrations

    conn = connect(tmp_path / "m.db", migrate=False)
    broken = migrations.Migration(9999, "m9999_broken", lambda c: c.execute("CREATE TABLE ("))
    monkeypatch.setattr(migrations, "all_migrations", lambda: [broken])
    with pytest.raises(Exception, match="syntax error"):
        migrate(conn)
    assert "m9999_broken" not in applied_names(conn)
    conn.close()


def test_transaction_rolls_back_on_error(tmp_path: Path) -> None:
    conn = connect(tmp_path / "m.db")
    store = SqliteSessionStore(conn)
    chat = store.get_or_create_chat("terminal", "x")
    with pytest.raises(RuntimeError), transaction(conn):
        store.append(chat.id, [NewMessage("user", "lost")])
        raise RuntimeError("boom")
    assert store.history(chat.id) == []
    conn.close()


def test_chats_are_unique_per_channel_and_external_id(tmp_path: Path) -> None:
    conn = connect(tmp_path / "m.db")
    store = SqliteSessionStore(conn)
    a = store.get_or_create_chat("telegram", "42", "Group", "group")
    b = store.get_or_create_chat("telegram", "42")
    c = store.get_or_create_chat("discord", "42")
    assert a.id == b.id and a.title == b.title == "Group"
    assert c.id != a.id
    conn.close()


def test_reset_starts_a_new_session_without_deleting(tmp_path: Path) -> None:
    conn = connect(tmp_path / "m.db")
    store = SqliteSessionStore(conn)
    chat = store.get_or_create_chat("terminal", "x")
    store.append(chat.id, [NewMessage("user", "old")])
    store.reset_session(chat.id)
    store.append(chat.id, [NewMessage("user", "new")])
    assert [m.content for m in store.history(chat.id)] == ["new"]
    assert store.count_messages(chat.id) == 2
    conn.close()
