"""The reused PostgreSQL test databases (`tests/pg_databases.py`): what a test gets after
another one used the database is what a fresh copy of the template gives, or the database
is dropped."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from core.bench.fakes.postgres import PostgresServer
from core.config import StorageConfig
from core.storage.engine import open_storage
from core.storage.stores import session_store
from tests.pg_databases import SCHEMA_DIGEST, MigratedDatabases


@pytest.fixture
def databases(
    postgres_server: PostgresServer, postgres_template: str
) -> Iterator[MigratedDatabases]:
    """A pool of this test's own (the session's may hold idle copies already)."""
    made = MigratedDatabases(postgres_server, postgres_template)
    yield made
    made.close()


def exists(server: PostgresServer, name: str) -> bool:
    with psycopg.connect(server.url()) as conn:
        query = "SELECT count(*) FROM pg_database WHERE datname = %s"
        return conn.execute(query, (name,)).fetchone() == (1,)


def first_chat_id(url: str) -> int:
    storage = open_storage(StorageConfig(url=url))
    try:
        return session_store(storage).get_or_create_chat("test", "someone").id
    finally:
        storage.close()


def test_a_used_database_comes_back_empty_with_its_ids_starting_again(
    postgres_server: PostgresServer, databases: MigratedDatabases
) -> None:
    name = databases.take()
    url = postgres_server.url(name)
    assert first_chat_id(url) == 1
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO chats (channel, external_chat_id) VALUES ('test', 'other')")
        conn.execute("CREATE TABLE a_tests_own (x int)")
        conn.execute("CREATE SEQUENCE a_tests_sequence")
        assert databases.give_back(name) is True  # this connection is ended, not waited for
    assert databases.take() == name
    assert first_chat_id(url) == 1  # no rows left, the sequence started again
    with psycopg.connect(url) as conn:
        own = conn.execute("SELECT count(*) FROM pg_class WHERE relname LIKE 'a_tests_%'")
        assert own.fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM chats").fetchone() == (1,)  # first_chat_id's


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE chats ADD COLUMN added int",
        "DROP TABLE llm_usage",
        "CREATE INDEX an_index ON chats (channel)",
        "DELETE FROM _migrations WHERE ctid = (SELECT min(ctid) FROM _migrations)",
        "ALTER DATABASE {name} SET work_mem = '8MB'",
    ],
)
def test_a_database_whose_schema_or_records_changed_is_dropped(
    postgres_server: PostgresServer, databases: MigratedDatabases, change: str
) -> None:
    name = databases.take()
    with psycopg.connect(postgres_server.url(name), autocommit=True) as conn:
        conn.execute(change.format(name=name))
    assert databases.give_back(name) is False
    assert not exists(postgres_server, name)
    assert databases.take() != name


def test_the_session_fixture_hands_out_a_fresh_state_each_time(
    migrated_postgres_url: str,
) -> None:
    assert first_chat_id(migrated_postgres_url) == 1


def test_a_blank_database_comes_back_as_createdb_makes_one(
    postgres_server: PostgresServer,
) -> None:
    """`fresh_postgres_url`'s pool: whatever a test made (schemas, extensions, tables,
    types, functions) is gone and the same database is handed out again."""
    blank = MigratedDatabases(postgres_server, "template1", blank=True)
    try:
        name = blank.take()
        url = postgres_server.url(name)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")
            conn.execute("CREATE SCHEMA other")
            conn.execute("CREATE TYPE mood AS ENUM ('ok')")
            conn.execute("CREATE TABLE other.t (id serial PRIMARY KEY, m mood)")
            conn.execute("CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'")
        open_storage(StorageConfig(url=url)).close()  # every migration, as a test may run
        assert blank.give_back(name) and blank.take() == name
        with psycopg.connect(url) as conn:
            assert conn.execute(SCHEMA_DIGEST).fetchone() == blank.digest
            assert conn.execute("SELECT count(*) FROM pg_extension").fetchone() == (1,)
            assert conn.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON"
                                " n.oid = c.relnamespace WHERE n.nspname = 'public'"
                                ).fetchone() == (0,)  # fmt: skip
        assert first_chat_id(url) == 1  # migrates again from nothing
        assert blank.give_back(name)
    finally:
        blank.close()
