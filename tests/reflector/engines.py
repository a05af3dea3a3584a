"""Test helpers for running the reflector's tests on both engines: raw SQL for assertions
(`?` placeholders, turned into psycopg's `%s` on PostgreSQL) and a chat with messages."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from core.config import StorageConfig
from core.db import transaction as sqlite_transaction
from core.pg_db import PgDatabase
from core.storage import Storage, open_storage


def query(storage: Storage, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Every row of `sql` on either engine."""
    if storage.postgres is not None:
        return storage.postgres.read(sql.replace("?", "%s"), params)
    return storage.sqlite_conn.execute(sql, params).fetchall()


def execute(storage: Storage, sql: str, params: Sequence[Any] = ()) -> None:
    """One committed write on either engine."""
    if storage.postgres is not None:
        storage.postgres.write(sql.replace("?", "%s"), params)
    else:
        storage.sqlite_conn.execute(sql, params)


def transaction(storage: Storage) -> AbstractContextManager[Any]:
    """One unit of work on either engine."""
    if storage.postgres is not None:
        return storage.postgres.transaction()
    return sqlite_transaction(storage.sqlite_conn)


def chat_with_messages(storage: Storage, name: str, count: int) -> tuple[int, list[int]]:
    """A terminal chat with `count` user messages (written as rows: the tests of the
    reflector's own stores need no session store)."""
    [(chat_id,)] = query(
        storage,
        "INSERT INTO chats (channel, external_chat_id) VALUES ('terminal', ?) RETURNING id",
        (name,),
    )
    ids = [
        query(
            storage,
            "INSERT INTO messages (chat_id, role, sender, content) VALUES (?, 'user', 'u', ?)"
            " RETURNING id",
            (chat_id, f"m{i}"),
        )[0][0]
        for i in range(count)
    ]
    return int(chat_id), [int(i) for i in ids]


def open_reflector_storage(url: str) -> Storage:
    """A migrated `Storage` with the reflector's tables on either engine.

    TEMPORARY, until the PostgreSQL memory migrations land (pgmemory): on PostgreSQL it
    migrates up to m0001, stands in a bare `memories` table for m0002 (the supersede edges
    refer to it), then applies the reflector's own m0003 and m0009.
    """
    if not url.startswith("postgresql://"):
        return open_storage(StorageConfig(url=url))
    from migrations import m0002_memories, m0003_reflector, m0009_reflector_skips

    db = PgDatabase(url, migrate=False)
    if hasattr(m0002_memories, "apply_postgresql"):
        db.migrate()
        return Storage(postgres=db)
    if db.read_one("SELECT to_regclass('reflector_runs')") != (None,):
        return Storage(postgres=db)  # a second process on the same database
    db.migrate(upto=1)
    with db.transaction() as conn:
        conn.execute("CREATE TABLE memories (id BIGINT PRIMARY KEY)")
        m0003_reflector.apply_postgresql(conn)
        m0009_reflector_skips.apply_postgresql(conn)
    return Storage(postgres=db)
