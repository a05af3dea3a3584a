"""The memory store tests on both engines: `engine` is a migrated SQLite file or PostgreSQL
database with helpers that peek at what each engine keeps (vector rows, chats).

Until every package's PostgreSQL migrations exist, the PostgreSQL side applies only the
migrations memory's tables need (m0001, memory's own, m0013) plus the reflector's
`memory_supersede_edges` table as m0003 defines it; once m0003 has `apply_postgresql`, it is
used instead, and after the merge `engine` can open its database with the shared `storage`
fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from core.db import connect
from core.pg_db import PgDatabase
from core.sqlite_store import SqliteSessionStore
from core.storage import Storage
from memory.embeddings import Embedder
from memory.store import MemoryStore
from memory.stores import memory_store
from migrations import PG_NOW_FUNCTION, all_migrations, m0003_reflector

MEMORY_MIGRATIONS = {1, 2, 5, 6, 7, 12, 13}
SUPERSEDE_EDGES = """CREATE TABLE memory_supersede_edges (
    old_id BIGINT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    new_id BIGINT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    created_at TEXT NOT NULL DEFAULT mnemo_now(),
    PRIMARY KEY (old_id, new_id)
)"""


def memory_pg_database(url: str) -> PgDatabase:
    """A PostgreSQL database with the tables the memory package uses."""
    return _migrated(PgDatabase(url, migrate=False))


def _migrated(db: PgDatabase) -> PgDatabase:
    if all(m.apply_postgresql is not None for m in all_migrations()):
        db.migrate()
        return db
    with db.transaction() as conn:
        conn.execute(PG_NOW_FUNCTION)
        if db.info.vector_loaded:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        for migration in all_migrations():
            if migration.number in MEMORY_MIGRATIONS and migration.apply_postgresql:
                migration.apply_postgresql(conn)
        reflector = getattr(m0003_reflector, "apply_postgresql", None)
        if reflector is not None:
            reflector(conn)
        else:
            conn.execute(SUPERSEDE_EDGES)
    return db


def without_pgvector(url: str) -> Storage:
    """A PostgreSQL database as on a server without pgvector (the store sees no extension)."""
    db = PgDatabase(url, migrate=False)
    db.info = replace(db.info, vector_version=None, vector_error="not installed (test)")
    return Storage(postgres=_migrated(db))


@dataclass
class Engine:
    """One engine's storage, and what the tests read of it directly."""

    storage: Storage
    data_dir: Path = Path("/nonexistent/mnemo-test-data")  # the `engine` fixture's: tmp_path

    @property
    def name(self) -> str:
        return self.storage.engine

    def store(self, embedder: Embedder | None = None) -> MemoryStore:
        return memory_store(self.storage, embedder)

    def chat(self, name: str) -> int:
        if self.storage.sqlite is not None:
            return SqliteSessionStore(self.storage.sqlite).get_or_create_chat("test", name).id
        row = self.storage.pg.read_one(  # until PgSessionStore lands (pgcore)
            "INSERT INTO chats (channel, external_chat_id) VALUES ('test', %s)"
            " ON CONFLICT (channel, external_chat_id) DO UPDATE SET title = chats.title"
            " RETURNING id",
            (name,),
        )
        assert row is not None
        return int(row[0])

    def another_connection(self) -> Storage:
        """A second connection (pool) to the same database, as another process has."""
        if self.storage.sqlite is not None:
            return Storage(sqlite=connect(self.storage.sqlite.info.path))
        db = PgDatabase(self.storage.pg.url, migrate=False)
        db.info = self.storage.pg.info
        return Storage(postgres=db)

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of one query; `?` placeholders on both engines."""
        if self.storage.sqlite is not None:
            return [tuple(row) for row in self.storage.sqlite.execute(sql, params).fetchall()]
        return self.storage.pg.read(sql.replace("?", "%s"), params)

    def run(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        if self.storage.sqlite is not None:
            self.storage.sqlite.execute(sql, params)
        else:
            self.storage.pg.write(sql.replace("?", "%s"), params)

    def vector_ids(self) -> set[int]:
        """Memories with a stored vector (the float table both engines keep)."""
        tables = {row[0] for row in self.rows(self._tables_sql())}
        if "memories_vec_float" not in tables:
            return set()
        found = {row[0] for row in self.rows("SELECT memory_id FROM memories_vec_float")}
        if "memories_vec" in tables:  # the KNN index (vec0 or pgvector) holds the same ids
            assert {row[0] for row in self.rows("SELECT memory_id FROM memories_vec")} == found
        return found

    def _tables_sql(self) -> str:
        if self.storage.sqlite is not None:
            return "SELECT name FROM sqlite_master WHERE type = 'table'"
        return "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"

    def index_model(self) -> tuple[str, int] | None:
        meta = dict(self.rows("SELECT key, value FROM memory_index_meta"))
        if "embedding_model" not in meta:
            return None
        return str(meta["embedding_model"]), int(meta["embedding_dim"])


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """The memory tables on each engine: a test using it runs on SQLite and PostgreSQL."""
    if request.param == "sqlite":
        storage = Storage(sqlite=connect(tmp_path / "mnemo.db"))
    else:
        storage = Storage(
            postgres=memory_pg_database(request.getfixturevalue("fresh_postgres_url"))
        )
    yield Engine(storage, tmp_path / "data")
    storage.close()
