"""The derived indexes of `memories`, as the one memory store sees them: `MemoryIndex`, with
the SQLite implementation (FTS5 and sqlite-vec, `memory.sqlite_index`) and the PostgreSQL
one (tsvector and pgvector, `memory.pg_index`). This is where the engines truly differ;
everything else about memories is written once in `memory.memory_store`.

Each method runs inside the caller's transaction when one is open.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from core.clock import now_iso
from core.storage.database import Database, PostgresDatabase, SqliteDatabase
from memory import pg_index, sqlite_index
from memory.store import Vector

VectorRow = tuple[int, int | None, Vector]  # memory id, chat id, vector
INDEX_READY_TTL_S = 5.0  # PostgreSQL: how long a ready vector index is taken as still ready


class MemoryIndex(Protocol):
    """Full-text and vector indexes of `memories` (their change log: `memory.change_log_store`)."""

    cache_key: object  # what in-process caches of the indexes are shared by

    def missing_extension(self) -> str | None:
        """Why no vector can be kept at all (an extension not loaded), or None."""
        ...

    def prepare(self, model_name: str, dim: int) -> bool:
        """Make the vector tables fit the model; True when they were (re)created."""
        ...

    def ready(self, model_name: str, dim: int) -> bool: ...

    def write_vectors(
        self, rows: Sequence[VectorRow], model_name: str, *, new_rows: bool = False
    ) -> None:
        """Store the vectors and mark the memories embedded with `model_name`. `new_rows`:
        memories inserted in this transaction with `embedding_model` already set (no vector
        to replace, nothing to mark)."""
        ...

    def keep_keywords(self, memory_id: int, chat_id: int | None, text: str, context: str) -> None:
        """Index a memory's new text for full-text search (PostgreSQL indexes the row)."""
        ...

    def drop_vector(self, memory_id: int) -> None:
        """The memory's vector goes (its text changed and it has no new vector yet)."""
        ...

    def unindex(self, memory_id: int) -> None:
        """The archived memory leaves every index (it is never a candidate again)."""
        ...

    def deleting(self, memory_ids: Sequence[int]) -> None:
        """These memories are about to be deleted: their index rows go."""
        ...

    def matching_ids(self, chat_id: int, text: str, limit: int) -> list[int]: ...

    def nearest(self, scopes: Sequence[int], vector: Vector, k: int) -> list[tuple[int, float]]: ...

    def vector_rows(
        self, chat_id: int | None, model_name: str, dim: int, memory_ids: Sequence[int] | None
    ) -> list[tuple[int, bytes]]: ...

    def reset(self, clear_vectors: bool) -> None:
        """Before a reindex: keyword rows rebuilt, vectors dropped if `clear_vectors`."""
        ...


def memory_index(db: Database) -> MemoryIndex:
    """The indexes of the engine `db` runs on."""
    if isinstance(db, PostgresDatabase):
        return PgMemoryIndex(db)
    assert isinstance(db, SqliteDatabase)
    return SqliteMemoryIndex(db)


class SqliteMemoryIndex:
    """FTS5 rows written with each memory; sqlite-vec binary codes and float32 vectors."""

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db
        self.conn = db.conn
        self.cache_key: object = db.conn

    def missing_extension(self) -> str | None:
        return None if self.conn.info.vec_loaded else "sqlite-vec is not loaded"

    def prepare(self, model_name: str, dim: int) -> bool:
        with self.db.transaction():
            return sqlite_index.ensure_vector_table(self.conn, model_name, dim)

    def ready(self, model_name: str, dim: int) -> bool:
        return sqlite_index.vector_index_ready(self.conn, model_name, dim)

    def write_vectors(
        self, rows: Sequence[VectorRow], model_name: str, *, new_rows: bool = False
    ) -> None:
        with self.db.transaction():
            for memory_id, chat_id, vector in rows:
                sqlite_index.store_vector(self.conn, memory_id, chat_id, vector)
                if not new_rows:
                    sqlite_index.set_embedding_model(self.conn, memory_id, model_name)

    def keep_keywords(self, memory_id: int, chat_id: int | None, text: str, context: str) -> None:
        sqlite_index.index_keywords(self.conn, memory_id, chat_id, text, context)

    def drop_vector(self, memory_id: int) -> None:
        if sqlite_index.vector_table_exists(self.conn) and self.conn.info.vec_loaded:
            sqlite_index.drop_vector(self.conn, memory_id)

    def unindex(self, memory_id: int) -> None:
        sqlite_index.unindex(self.conn, memory_id)

    def deleting(self, memory_ids: Sequence[int]) -> None:
        sqlite_index.unindex_all(self.conn, memory_ids)

    def matching_ids(self, chat_id: int, text: str, limit: int) -> list[int]:
        return sqlite_index.fts_matching_ids(self.conn, chat_id, text, limit)

    def nearest(self, scopes: Sequence[int], vector: Vector, k: int) -> list[tuple[int, float]]:
        return sqlite_index.nearest(self.conn, scopes, vector, k)

    def vector_rows(
        self, chat_id: int | None, model_name: str, dim: int, memory_ids: Sequence[int] | None
    ) -> list[tuple[int, bytes]]:
        if self.missing_extension() is not None or not self.ready(model_name, dim):
            return []
        return sqlite_index.vector_rows(self.conn, chat_id, memory_ids)

    def reset(self, clear_vectors: bool) -> None:
        with self.db.transaction():
            sqlite_index.rebuild_keywords(self.conn)
            if clear_vectors:
                sqlite_index.clear_vectors(self.conn)


class PgMemoryIndex:
    """PostgreSQL's own full-text index (nothing to write); float32 vectors always, and
    pgvector's table for KNN in the server when the extension is installed."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        self.pg = db.pg
        self.cache_key: object = db.pg
        self._ready_until = 0.0  # the vector index was found ready until then

    @property
    def _pgvector(self) -> bool:
        return self.pg.info.vector_loaded

    def missing_extension(self) -> str | None:
        return None  # without pgvector, vectors are kept as bytes and ranked in the process

    def prepare(self, model_name: str, dim: int) -> bool:
        with self.pg.transaction() as conn:
            pg_index.lock_log(conn)  # one process (re)creates the tables at a time
            return pg_index.ensure_vector_tables(conn, model_name, dim, self._pgvector)

    def ready(self, model_name: str, dim: int) -> bool:
        if time.monotonic() < self._ready_until:  # asked every turn; a round trip
            return True
        with self.pg.reading() as conn:  # autocommit: one round trip a read
            ready = pg_index.vector_index_ready(conn, model_name, dim, self._pgvector)
        if ready:
            self._ready_until = time.monotonic() + INDEX_READY_TTL_S
        return ready

    def write_vectors(
        self, rows: Sequence[VectorRow], model_name: str, *, new_rows: bool = False
    ) -> None:
        with self.pg.transaction() as conn:
            if new_rows:
                pg_index.copy_new_vectors(conn, list(rows), self._pgvector)
            else:
                pg_index.store_vectors(conn, list(rows), model_name, self._pgvector)

    def keep_keywords(self, memory_id: int, chat_id: int | None, text: str, context: str) -> None:
        return None  # the GIN expression index of migration m0002 follows the row

    def _vector_tables(self, conn: Any) -> int:
        """How many vector tables exist (any process may have made them): 0, 1 (floats
        only) or 2 (floats and pgvector's)."""
        return pg_index.index_state(conn)[1]

    def drop_vector(self, memory_id: int) -> None:
        with self.pg.connection() as conn:
            if tables := self._vector_tables(conn):
                pg_index.drop_vector(conn, memory_id, with_knn_table=tables == 2)

    def unindex(self, memory_id: int) -> None:
        self.drop_vector(memory_id)

    def deleting(self, memory_ids: Sequence[int]) -> None:
        return None  # the vector tables reference `memories` ON DELETE CASCADE

    def matching_ids(self, chat_id: int, text: str, limit: int) -> list[int]:
        with self.pg.connection() as conn:
            return pg_index.matching_ids(conn, chat_id, text, limit)

    def nearest(self, scopes: Sequence[int], vector: Vector, k: int) -> list[tuple[int, float]]:
        with self.pg.reading() as conn:  # autocommit: one round trip a read
            return pg_index.nearest(conn, scopes, vector, k, self._pgvector)

    def vector_rows(
        self, chat_id: int | None, model_name: str, dim: int, memory_ids: Sequence[int] | None
    ) -> list[tuple[int, bytes]]:
        with self.pg.reading() as conn:  # autocommit: one round trip a read
            if self._vector_tables(conn) == 0:
                return []
            return pg_index.vector_rows(conn, chat_id, model_name, now_iso(), memory_ids)

    def reset(self, clear_vectors: bool) -> None:
        if clear_vectors:
            with self.pg.transaction() as conn:
                pg_index.clear_vectors(conn, self._pgvector)
