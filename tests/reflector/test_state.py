"""Reflector bookkeeping: the migrations, the per-chat cursor, leases and the run log, on
both engines (`storage_url`), and what only PostgreSQL needs locks for."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import StorageConfig
from core.storage.db import connect
from core.storage.engine import Storage, open_storage, postgres_storage, sqlite_storage
from core.storage.pg_db import PgDatabase
from migrations import migrate
from reflector.store import ChatRun, Lease
from reflector.stores import cursor_store, lease_store, run_store
from tests.reflector.engines import (
    as_processes,
    chat_with_messages,
    execute,
    query,
    transaction,
)

TABLES = {"memory_reflector_state", "reflector_runs", "reflector_leases", "memory_supersede_edges"}


@pytest.fixture
def db(storage: Storage) -> Storage:
    """A migrated database, once per engine."""
    return storage


def open_url(url: str) -> Storage:
    """The database at `url`, migrated: what another process would open."""
    return open_storage(StorageConfig(url=url))


def open_old(url: str, upto: int) -> Storage:
    """The database at `url` migrated only up to migration `upto`: an older deployment."""
    if url.startswith("postgresql://"):
        postgres = PgDatabase(url, migrate=False)
        postgres.migrate(upto=upto)
        return postgres_storage(postgres)
    path = Path(url.removeprefix("sqlite:///"))
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = connect(path, migrate=False)
    migrate(conn, upto=upto)
    return sqlite_storage(conn)


def seeded_chat(url: str, count: int) -> tuple[int, list[int]]:
    """A chat with `count` messages written by a process of its own (closed again)."""
    setup = open_url(url)
    try:
        return chat_with_messages(setup, "a", count)
    finally:
        setup.close()


def table_names(storage: Storage) -> set[str]:
    if storage.engine == "postgresql":
        rows = query(storage, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    else:
        rows = query(storage, "SELECT name FROM sqlite_master WHERE type = 'table'")
    return {row[0] for row in rows}


def test_migration_adds_the_tables_to_an_old_database(blank_storage_url: str) -> None:
    old = open_old(blank_storage_url, upto=2)
    assert not table_names(old) & TABLES
    chat_id, _ = chat_with_messages(old, "a", 3)
    old.close()
    new = open_url(blank_storage_url)
    try:
        assert table_names(new) >= TABLES
        assert cursor_store(new).pending_chats() == [chat_id]
    finally:
        new.close()


def test_the_postgresql_tables_have_sqlites_columns_in_order(
    tmp_path: Path, fresh_postgres_url: str
) -> None:
    """`mnemo storage migrate` copies table by table: same columns, same order."""
    sqlite = open_storage(StorageConfig(url=f"sqlite:///{tmp_path / 'm.db'}"))
    postgres = open_url(fresh_postgres_url)
    try:
        for table in sorted(TABLES):
            lite = [row[1] for row in query(sqlite, f"PRAGMA table_info({table})")]
            pg = query(
                postgres,
                "SELECT column_name FROM information_schema.columns WHERE table_name = ?"
                " ORDER BY ordinal_position",
                (table,),
            )
            assert [row[0] for row in pg] == lite, table
    finally:
        sqlite.close()
        postgres.close()


def test_cursor_finds_pending_chats_and_moves_only_from_the_expected_position(
    db: Storage,
) -> None:
    a, a_ids = chat_with_messages(db, "a", 3)
    b, b_ids = chat_with_messages(db, "b", 2)
    chat_with_messages(db, "empty", 0)
    cursor = cursor_store(db)
    assert sorted(cursor.pending_chats()) == [a, b]
    assert cursor.pending_chats([b]) == [b] and cursor.pending_chats([]) == []
    assert cursor.position(a) == 0
    assert cursor.advance(a, 0, a_ids[-1])
    assert cursor.position(a) == a_ids[-1]
    assert not cursor.advance(a, 0, a_ids[0])  # someone else moved it: refused
    assert not cursor.advance(a, a_ids[0], a_ids[1])
    assert cursor.position(a) == a_ids[-1]
    assert cursor.pending_chats() == [b]
    cursor.reset(b, b_ids[-1])
    assert cursor.pending_chats() == []
    cursor.reset(b, 0)
    assert not cursor.advance(b, b_ids[0], b_ids[1]) and cursor.advance(b, 0, b_ids[0])
    cursor.forget_chat(a)
    assert cursor.position(a) == 0 and cursor.pending_chats() == [a, b]


def test_pending_chats_come_oldest_cursor_first(db: Storage) -> None:
    a, a_ids = chat_with_messages(db, "a", 2)
    b, b_ids = chat_with_messages(db, "b", 2)
    cursor = cursor_store(db)
    assert cursor.pending_chats() == [a, b]  # neither has a cursor: by id
    cursor.advance(a, 0, a_ids[0])
    time.sleep(0.01)
    cursor.advance(b, 0, b_ids[0])
    assert cursor.pending_chats() == [a, b]
    time.sleep(0.01)
    cursor.advance(a, a_ids[0], a_ids[0])  # a moved last: now b's cursor is the older
    assert cursor.pending_chats() == [b, a]


def test_a_lease_has_one_owner_until_it_expires(db: Storage) -> None:
    chat_id, _ = chat_with_messages(db, "a", 1)
    now = [1000.0]
    leases = lease_store(db, lease_s=60, clock=lambda: now[0])
    first = leases.claim(chat_id)
    assert first is not None and leases.holds(first)
    assert leases.claim(chat_id) is None  # a second pass in the same process
    now[0] += 61
    second = leases.claim(chat_id)  # the first holder crashed: taken over after expiry
    assert second is not None and second.owner != first.owner
    assert not leases.holds(first) and leases.holds(second)
    assert leases.renew(first) is None  # the old owner cannot extend it either
    leases.release(first)  # a stale owner cannot release someone else's lease
    assert leases.holds(second)
    leases.release(second)
    assert leases.claim(chat_id) is not None


def test_a_renewed_lease_outlives_its_first_expiry(db: Storage) -> None:
    chat_id, _ = chat_with_messages(db, "a", 1)
    now = [1000.0]
    leases = lease_store(db, lease_s=60, clock=lambda: now[0])
    lease = leases.claim(chat_id)
    assert lease is not None
    now[0] += 50
    renewed = leases.renew(lease)
    assert renewed is not None and renewed.expires_at == 1110.0
    now[0] += 50  # past the first expiry, within the renewed one
    assert leases.claim(chat_id) is None and leases.holds(renewed)
    leases.forget_chat(chat_id)  # a deleted chat: its pass loses the lease
    assert not leases.holds(renewed) and leases.renew(renewed) is None


def test_claim_next_takes_the_first_free_chat_in_order(db: Storage) -> None:
    chats = [chat_with_messages(db, name, 1)[0] for name in "abc"]
    leases = lease_store(db, lease_s=60)
    assert leases.claim_next([]) is None
    held = leases.claim(chats[1])
    first = leases.claim_next([chats[1], chats[2], chats[0]])
    assert held is not None and first is not None and first.chat_id == chats[2]
    second = leases.claim_next([chats[1], chats[2], chats[0]])
    assert second is not None and second.chat_id == chats[0]
    assert leases.claim_next(chats) is None
    leases.release(held)
    again = leases.claim_next(chats)
    assert again is not None and again.chat_id == chats[1]


def test_concurrent_claims_from_many_connections_have_one_winner(storage_url: str) -> None:
    chat_id, _ = seeded_chat(storage_url, 1)
    winners: list[str] = []

    def contend(storage: Storage, _: int) -> None:
        lease = lease_store(storage, lease_s=600).claim(chat_id)
        if lease is not None:
            winners.append(lease.owner)

    as_processes(storage_url, 6, contend)
    assert len(winners) == 1


def test_workers_claiming_together_take_every_chat_exactly_once(storage_url: str) -> None:
    """4 workers (own connections) claim from the same 12 due chats until none is left."""
    setup = open_url(storage_url)
    chats = [chat_with_messages(setup, f"c{i}", 1)[0] for i in range(12)]
    setup.close()
    taken: list[int] = []

    def worker(storage: Storage, _: int) -> None:
        leases = lease_store(storage, lease_s=600)
        while (lease := leases.claim_next(chats)) is not None:
            taken.append(lease.chat_id)

    as_processes(storage_url, 4, worker)
    assert sorted(taken) == chats


def test_run_log_records_successes_and_failures(db: Storage) -> None:
    chat_id, _ = chat_with_messages(db, "a", 1)
    log = run_store(db)
    done = ChatRun(chat_id, messages_seen=3, added=2, skipped=1, model="m", ok=True)
    first_id = log.record(done)
    second_id = log.record(ChatRun(chat_id, messages_seen=3, model="m", ok=False, error="boom"))
    assert second_id > first_id
    newest, older = log.recent(chat_id)
    assert (newest.id, newest.ok, newest.error, newest.status) == (
        second_id,
        False,
        "boom",
        "failed",
    )
    assert (older.ok, older.added, older.skipped, older.messages_seen) == (True, 2, 1, 3)
    assert [row.id for row in log.recent(limit=1)] == [newest.id]
    assert log.count(chat_id) == 2 and log.forget_chat(chat_id) == 2
    assert log.recent(chat_id) == [] and log.count(chat_id) == 0


def test_migration_0009_gives_old_runs_a_status(blank_storage_url: str) -> None:
    old = open_old(blank_storage_url, upto=8)
    chat_id, _ = chat_with_messages(old, "a", 1)
    for ok in (1, 0):
        execute(
            old,
            "INSERT INTO reflector_runs (chat_id, started_at, ok, error) VALUES (?, 'x', ?, ?)",
            (chat_id, ok, None if ok else "boom"),
        )
    old.close()
    new = open_url(blank_storage_url)
    try:
        failed, done = run_store(new).recent(chat_id)
        assert (failed.status, failed.batch_failed, done.status) == ("failed", False, "done")
    finally:
        new.close()


def test_migration_0016_keeps_old_runs_and_says_their_skip_reasons_were_not_recorded(
    blank_storage_url: str,
) -> None:
    old = open_old(blank_storage_url, upto=13)
    chat_id, _ = chat_with_messages(old, "a", 1)
    execute(
        old,
        "INSERT INTO reflector_runs (chat_id, started_at, ok, memories_skipped, status)"
        " VALUES (?, 'x', 1, 2, 'done')",
        (chat_id,),
    )
    old.close()
    new = open_url(blank_storage_url)
    try:
        [row] = run_store(new).recent(chat_id)
        assert row.skip_reasons == "" and "2 skipped (reason not recorded)" in row.summary()
        run = ChatRun(chat_id, ok=True, status="done")
        run.skip("ungrounded", 2)
        run_store(new).record(run)
        assert run_store(new).recent(chat_id)[0].skip_reasons == "2 ungrounded"
    finally:
        new.close()


def test_failed_attempts_count_batch_failures_since_the_last_completed_batch(
    db: Storage,
) -> None:
    chat_id, ids = chat_with_messages(db, "a", 3)
    log = run_store(db)

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


def test_of_two_cursor_moves_from_one_position_exactly_one_wins(storage_url: str) -> None:
    """Two processes' commits, the second waiting on the first's open transaction."""
    chat_id, ids = seeded_chat(storage_url, 2)
    results: list[bool] = []

    def move(storage: Storage, number: int) -> None:
        with transaction(storage):
            results.append(cursor_store(storage).advance(chat_id, 0, ids[number]))
            time.sleep(0.2)  # the other mover waits for this transaction

    as_processes(storage_url, 2, move)
    assert sorted(results) == [False, True]


# -- PostgreSQL only: what SQLite's single writer gives for free ------------------------


@pytest.fixture
def two_pg(fresh_postgres_url: str) -> Iterator[tuple[Storage, Storage]]:
    """Two processes' pools on one PostgreSQL database."""
    one = open_url(fresh_postgres_url)
    two = open_url(fresh_postgres_url)
    yield one, two
    one.close()
    two.close()


def test_a_claimant_skips_a_chat_being_claimed_elsewhere_instead_of_waiting(
    two_pg: tuple[Storage, Storage],
) -> None:
    one, two = two_pg
    a, _ = chat_with_messages(one, "a", 1)
    b, _ = chat_with_messages(one, "b", 1)
    leases = lease_store(two, lease_s=60)
    first = leases.claim_next([a, b])
    assert first is not None and first.chat_id == a
    leases.release(first)  # its row stays, vacant
    with one.database.transaction():  # another worker in the middle of claiming a
        one.database.read("SELECT 1 FROM reflector_leases WHERE chat_id = ? FOR UPDATE", (a,))
        claimed: list[Lease | None] = []
        claimant = threading.Thread(
            target=lambda: claimed.append(lease_store(two, lease_s=60).claim_next([a, b]))
        )
        claimant.start()
        claimant.join(timeout=5)
        assert not claimant.is_alive()  # a was skipped, not waited for
    claimant.join()
    [lease] = claimed
    assert lease is not None and lease.chat_id == b


def test_the_commit_holds_the_lease_until_it_ends(two_pg: tuple[Storage, Storage]) -> None:
    """A lease expiring while its pass commits is not taken over mid-commit."""
    one, two = two_pg
    chat_id, _ = chat_with_messages(one, "a", 1)
    now = [1000.0]
    mine = lease_store(one, lease_s=10, clock=lambda: now[0])
    lease = mine.claim(chat_id)
    assert lease is not None
    now[0] += 11  # expired
    with transaction(one):
        assert mine.holds(lease)  # checked in the commit: the row is now locked
        assert lease_store(two, lease_s=10, clock=lambda: now[0]).claim(chat_id) is None
    assert lease_store(two, lease_s=10, clock=lambda: now[0]).claim(chat_id) is not None


def test_the_chat_write_lock_makes_other_writers_of_that_chat_wait(
    two_pg: tuple[Storage, Storage],
) -> None:
    one, two = two_pg
    a, _ = chat_with_messages(one, "a", 1)
    b, _ = chat_with_messages(one, "b", 1)
    waited: dict[int, float] = {}

    def lock(chat_id: int) -> None:
        started = time.monotonic()
        with transaction(two):
            lease_store(two, lease_s=60).lock_chat_writes(chat_id)
        waited[chat_id] = time.monotonic() - started

    with transaction(one):
        lease_store(one, lease_s=60).lock_chat_writes(a)
        other = threading.Thread(target=lock, args=(b,))
        other.start()
        other.join()
        same = threading.Thread(target=lock, args=(a,))
        same.start()
        time.sleep(0.5)
        assert same.is_alive()  # still waiting for this transaction
    same.join(timeout=10)
    assert waited[b] < 0.5 and waited[a] >= 0.5
