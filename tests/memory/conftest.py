"""The memory store tests on both engines: `engine` wraps the shared `storage` fixture (a
migrated SQLite file or PostgreSQL database) with helpers that peek at what each engine
keeps (vector rows, the change log) and a way to open a second connection."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from core.storage.db import connect
from core.storage.engine import Storage, postgres_storage, sqlite_storage
from core.storage.pg_db import PgDatabase
from core.storage.stores import session_store
from memory.embeddings import Embedder
from memory.store import MemoryStore
from memory.stores import memory_store


def memory_pg_database(url: str) -> PgDatabase:
    """A migrated PostgreSQL database (the server's pgvector as it is)."""
    return PgDatabase(url)


def without_pgvector(url: str) -> Storage:
    """A PostgreSQL database as on a server without pgvector (the store sees no extension)."""
    db = PgDatabase(url, migrate=False)
    db.info = replace(db.info, vector_version=None, vector_error="not installed (test)")
    db.migrate()
    return postgres_storage(db)


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
        return session_store(self.storage).get_or_create_chat("test", name).id

    def another_connection(self) -> Storage:
        """A second connection (pool) to the same database, as another process has."""
        database: Any = self.storage.database
        if self.storage.engine == "sqlite":
            return sqlite_storage(connect(database.conn.info.path))
        db = PgDatabase(database.pg.url, migrate=False)
        db.info = database.pg.info
        return postgres_storage(db)

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of one query; `?` placeholders on both engines."""
        return [tuple(row) for row in self.storage.database.read(sql, params)]

    def run(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        self.storage.database.write(sql, params)

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
        if self.storage.engine == "sqlite":
            return "SELECT name FROM sqlite_master WHERE type = 'table'"
        return "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"

    def index_model(self) -> tuple[str, int] | None:
        meta = dict(self.rows("SELECT key, value FROM memory_index_meta"))
        if "embedding_model" not in meta:
            return None
        return str(meta["embedding_model"]), int(meta["embedding_dim"])


@pytest.fixture
def engine(storage: Storage, tmp_path: Path) -> Engine:
    """The memory tables on each engine: a test using it runs on SQLite and PostgreSQL."""
    return Engine(storage, tmp_path / "data")
