"""`PgDatabase` on a real PostgreSQL server: transactions shared by stores, rollback,
migrations under a lock, recovery from dropped connections, and the engine chosen by
`[storage] url`."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

from core.config import StorageConfig
from core.errors import StorageError
from core.storage.engine import open_storage
from core.storage.pg_db import PgDatabase, redact_url


@pytest.fixture
def db(fresh_postgres_url: str) -> Iterator[PgDatabase]:
    database = PgDatabase(fresh_postgres_url, migrate=False)
    database.write("CREATE TABLE items (id int PRIMARY KEY, label text NOT NULL)")
    yield database
    database.close()


def labels(db: PgDatabase) -> list[str]:
    return [row[0] for row in db.read("SELECT label FROM items ORDER BY id")]


def test_nested_transactions_share_one_connection_and_commit_together(db: PgDatabase) -> None:
    with db.transaction() as outer:
        db.write("INSERT INTO items VALUES (1, 'one')")
        with db.transaction() as inner, db.connection() as borrowed:
            assert inner is outer and borrowed is outer
            db.write("INSERT INTO items VALUES (2, 'two')")
    assert labels(db) == ["one", "two"]


def test_an_exception_rolls_back_every_write_of_the_transaction(db: PgDatabase) -> None:
    with pytest.raises(RuntimeError), db.transaction():
        db.write("INSERT INTO items VALUES (1, 'one')")
        db.write("INSERT INTO items VALUES (2, 'two')")
        raise RuntimeError("the turn failed")
    assert labels(db) == []


def test_a_write_outside_a_transaction_commits_at_once(db: PgDatabase) -> None:
    assert db.write("INSERT INTO items VALUES (1, 'one')") == 1
    with psycopg.connect(db.url) as other:
        assert other.execute("SELECT label FROM items").fetchall() == [("one",)]


def test_reads_outside_a_transaction_open_none(db: PgDatabase) -> None:
    """`reading()` lends a connection in autocommit: a read leaves no transaction open (no
    BEGIN before it, no COMMIT after it: one round trip instead of three); inside a
    transaction it is the transaction's own connection, which sees its writes."""
    db.write("INSERT INTO items VALUES (1, 'one')")
    with db.reading() as conn:
        assert conn.execute("SELECT label FROM items").fetchall() == [("one",)]
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with db.connection() as conn:  # the other way: a transaction is open after a read
        conn.execute("SELECT 1")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    with db.transaction() as outer:
        db.write("INSERT INTO items VALUES (2, 'two')")
        with db.reading() as conn:
            assert conn is outer
            assert conn.execute("SELECT count(*) FROM items").fetchone() == (2,)
    with db.reading() as conn:
        conn.execute("SELECT 1")
    with db.connection() as conn:
        assert not conn.autocommit  # handed back as it was lent


def test_a_statement_hands_its_connection_back_before_it_returns(db: PgDatabase) -> None:
    """One thread's statements never wait for a connection: each is back in the pool when
    the statement returns (a pool `reset` callback would hand each returned connection to
    a worker thread, so the next statement found none and queued, or grew the pool)."""
    db.write("INSERT INTO items VALUES (1, 'one')")
    for _ in range(200):
        assert labels(db) == ["one"]
        with db.reading() as conn:
            conn.execute("SELECT 1")
    stats = db.pool.get_stats()
    assert stats.get("requests_queued", 0) == 0
    assert stats["pool_size"] == 1  # one connection served them all


def test_connections_killed_by_the_server_are_replaced(db: PgDatabase) -> None:
    db.write("INSERT INTO items VALUES (1, 'one')")
    with psycopg.connect(db.url, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    assert killed, "the pool held at least one connection"
    assert labels(db) == ["one"]  # the pool noticed and reconnected
    db.write("INSERT INTO items VALUES (2, 'two')")
    assert labels(db) == ["one", "two"]


def test_migrations_run_once_when_processes_start_together(fresh_postgres_url: str) -> None:
    errors: list[BaseException] = []
    applied: list[list[str]] = []

    def start() -> None:
        try:
            database = PgDatabase(fresh_postgres_url, migrate=False)
            applied.append(database.migrate(upto=1))
            database.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(applied, key=len) == [[], [], ["m0001_initial"]]


def test_the_url_picks_the_engine(fresh_postgres_url: str, tmp_path: object) -> None:
    assert StorageConfig().engine == "sqlite"
    assert StorageConfig(url="sqlite:///x/y.db").database_path.as_posix() == "x/y.db"
    config = StorageConfig(url=fresh_postgres_url)
    assert config.engine == "postgresql"
    storage = open_storage(config, migrate=False)
    try:
        assert storage.engine == "postgresql"
        assert storage.database.pg.info.vector_loaded  # the test server ships pgvector
        assert "PostgreSQL 18" in storage.describe()
    finally:
        storage.close()


def test_a_wrong_url_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="neither sqlite"):
        StorageConfig(url="mysql://x")
    with pytest.raises(
        StorageError, match=r"cannot connect to postgresql://u:\*\*\*@127.0.0.1:9/x"
    ):
        PgDatabase("postgresql://u:secret@127.0.0.1:9/x?connect_timeout=1", migrate=False)


def test_passwords_never_reach_logs() -> None:
    assert (
        redact_url("postgresql://bot:hunter2@db:5432/mnemo") == "postgresql://bot:***@db:5432/mnemo"
    )
    assert redact_url("postgresql://db/mnemo") == "postgresql://db/mnemo"
