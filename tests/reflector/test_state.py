"""Reflector bookkeeping: the migration, the per-chat cursor, leases and the run log."""

from __future__ import annotations

import threading
from pathlib import Path

from core.db import Connection, connect, transaction
from core.sqlite_store import SqliteSessionStore
from core.store import NewMessage
from migrations import applied_names, migrate
from reflector.sqlite_store import SqliteCursorStore, SqliteLeaseStore, SqliteRunStore
from reflector.store import ChatRun

TABLES = {"memory_reflector_state", "reflector_runs", "reflector_leases", "memory_supersede_edges"}


def chat_with_messages(conn: Connection, name: str, count: int) -> tuple[int, list[int]]:
    store = SqliteSessionStore(conn)
    chat = store.get_or_create_chat("terminal", name)
    ids = store.append(chat.id, [NewMessage("user", f"m{i}", "u") for i in range(count)])
    return chat.id, ids


def test_migration_adds_the_tables_to_an_old_database(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = connect(path, migrate=False)
    migrate(old, upto=2)
    chat_id, _ = chat_with_messages(old, "a", 3)
    old.close()
    conn = connect(path)
    assert "m0003_reflector" in applied_names(conn)
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert tables >= TABLES
    assert SqliteCursorStore(conn).pending_chats() == [chat_id]
    conn.close()


def test_cursor_finds_pending_chats_and_moves_only_from_the_expected_position(
    tmp_path: Path,
) -> None:
    conn = connect(tmp_path / "m.db")
    a, a_ids = chat_with_messages(conn, "a", 3)
    b, b_ids = chat_with_messages(conn, "b", 2)
    SqliteSessionStore(conn).get_or_create_chat("terminal", "empty")
    cursor = SqliteCursorStore(conn)
    assert sorted(cursor.pending_chats()) == [a, b]
    assert cursor.pending_chats([b]) == [b] and cursor.pending_chats([]) == []
    assert cursor.position(a) == 0
    assert cursor.advance(a, 0, a_ids[-1])
    assert cursor.position(a) == a_ids[-1]
    assert not cursor.advance(a, 0, a_ids[0])  # someone else moved it: refused
    assert cursor.position(a) == a_ids[-1]
    assert cursor.pending_chats() == [b]
    cursor.reset(b, b_ids[-1])
    assert cursor.pending_chats() == []
    conn.close()


def test_a_lease_has_one_owner_until_it_expires(tmp_path: Path) -> None:
    conn = connect(tmp_path / "m.db")
    chat_id, _ = chat_with_messages(conn, "a", 1)
    now = [1000.0]
    leases = SqliteLeaseStore(conn, lease_s=60, clock=lambda: now[0])
    first = leases.claim(chat_id)
    assert first is not None and leases.holds(first)
    assert leases.claim(chat_id) is None  # a second pass in the same process
    now[0] += 61
    second = leases.claim(chat_id)  # the first holder crashed: taken over after expiry
    assert second is not None and second.owner != first.owner
    assert not leases.holds(first) and leases.holds(second)
    leases.release(first)  # a stale owner cannot release someone else's lease
    assert leases.holds(second)
    leases.release(second)
    assert leases.claim(chat_id) is not None
    conn.close()


def test_concurrent_claims_from_many_connections_have_one_winner(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    setup = connect(path)
    chat_id, _ = chat_with_messages(setup, "a", 1)
    setup.close()
    barrier = threading.Barrier(6)
    winners: list[str] = []
    errors: list[BaseException] = []

    def contend() -> None:
        conn = connect(path)
        try:
            barrier.wait()
            lease = SqliteLeaseStore(conn, lease_s=600).claim(chat_id)
            if lease is not None:
                winners.append(lease.owner)
        except BaseException as exc:
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=contend) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(winners) == 1


def test_run_log_records_successes_and_failures(tmp_path: Path) -> None:
    conn = connect(tmp_path / "m.db")
    chat_id, _ = chat_with_messages(conn, "a", 1)
    log = SqliteRunStore(conn)
    done = ChatRun(chat_id, messages_seen=3, added=2, skipped=1, model="m", ok=True)
    with transaction(conn):
        log.record(done)
    log.record(ChatRun(chat_id, messages_seen=3, model="m", ok=False, error="boom"))
    newest, older = log.recent(chat_id)
    assert (newest.ok, newest.error) == (False, "boom")
    assert (older.ok, older.added, older.skipped, older.messages_seen) == (True, 2, 1, 3)
    assert [row.id for row in log.recent(limit=1)] == [newest.id]
    conn.close()


def test_migration_0009_gives_old_runs_a_status(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = connect(path, migrate=False)
    migrate(old, upto=8)
    chat_id, _ = chat_with_messages(old, "a", 1)
    for ok in (1, 0):
        old.execute(
            "INSERT INTO reflector_runs (chat_id, started_at, ok, error) VALUES (?, 'x', ?, ?)",
            (chat_id, ok, None if ok else "boom"),
        )
    old.close()
    conn = connect(path)
    assert "m0009_reflector_skips" in applied_names(conn)
    failed, done = SqliteRunStore(conn).recent(chat_id)
    assert (failed.status, failed.batch_failed, done.status) == ("failed", False, "done")
    conn.close()


def test_failed_attempts_count_batch_failures_since_the_last_completed_batch(
    tmp_path: Path,
) -> None:
    conn = connect(tmp_path / "m.db")
    chat_id, ids = chat_with_messages(conn, "a", 3)
    log = SqliteRunStore(conn)

    def run(status: str, first: int, seen: int, batch_failed: bool) -> None:
        ok = status == "done"
        log.record(
            ChatRun(
                chat_id,
                first_message_id=first,
                last_message_id=first + seen - 1,
                messages_seen=seen,
                ok=ok,
                status=status,
                batch_failed=batch_failed,
            )
        )

    assert log.failed_attempts(chat_id, ids[0]).count == 0
    run("failed", ids[0], 3, True)
    run("failed", ids[0], 3, False)  # an outage: not the batch's fault
    run("failed", ids[0], 2, True)
    attempts = log.failed_attempts(chat_id, ids[0])
    assert (attempts.count, attempts.last_seen) == (2, 2)
    assert log.failed_attempts(chat_id, ids[1]).count == 0
    run("done", ids[0], 1, False)  # e.g. the cursor was reset and the batch went through
    assert log.failed_attempts(chat_id, ids[0]).count == 0
    conn.close()
