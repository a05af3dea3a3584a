"""PgMemoryStore: the `MemoryStore` on PostgreSQL (full-text search and pgvector as indexes).

The same contract as `memory.sqlite_store.SqliteMemoryStore`. Differences that matter:
- the full-text index is PostgreSQL's own (GIN over a tsvector expression), so writes keep
  only the vector rows in step (`memory.pg_index_store`);
- vectors are always kept as float32 bytes, so ranking (which scores a chat's vectors in
  this process, `memory.vector_cache`) works whether or not the server has pgvector; with
  pgvector the near-duplicate check asks the server for the nearest vectors;
- the change log is written by PL/pgSQL triggers (migration m0006), read the same way, so
  every process's keyword lists and vectors stay current whichever machine wrote;
- every call is one round trip or a few, inside the caller's transaction when one is open
  (`PgDatabase.transaction`), and the write methods are one transaction each otherwise.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any

from core.clock import iso_utc, now_iso, utc_now
from core.errors import InputError
from core.pg_db import PgDatabase
from memory import note_store
from memory import pg_index_store as index
from memory import pg_tombstone_store as tombstones
from memory.embeddings import Embedder
from memory.index_store import embedding_text
from memory.store import (
    MAX_CONTENT_CHARS,
    MAX_MEMORY_ID,
    Changes,
    Ids,
    Marks,
    Memories,
    Memory,
    NoteChange,
    RankingRows,
    Tombstones,
    Vector,
    VectorRows,
    check_confidence,
    clean_category,
    clean_content,
    clean_expiry,
    memory_from_row,
    scope_of,
)
from memory.terms import jaccard_sets, tokens

logger = logging.getLogger(__name__)

INDEX_READY_TTL_S = 5.0  # how long a ready vector index is taken as still ready
_COLUMNS = (
    "id, chat_id, content, category, confidence, source, created_at, updated_at,"
    " last_seen_at, archived, expires_at, embedding_model, context, sender_id, sender_name"
)
_ACTIVE = "archived = 0 AND (expires_at IS NULL OR expires_at > %s)"


class PgMemoryStore:
    """All reads and writes of structured memories on one PostgreSQL database."""

    def __init__(self, db: PgDatabase, embedder: Embedder | None = None) -> None:
        self._index_ready_until = 0.0  # the vector index was found ready until then
        self.db = db
        self.embedder = embedder
        self._vectors_checked = False

    @property
    def _pgvector(self) -> bool:
        return self.db.info.vector_loaded

    def transaction(self) -> AbstractContextManager[Any]:
        return self.db.transaction()

    def with_embedder(self, embedder: Embedder | None) -> PgMemoryStore:
        return PgMemoryStore(self.db, embedder)

    # -- vectors -----------------------------------------------------------------------

    @property
    def vectors_enabled(self) -> bool:
        return self.embedder is not None

    def prepare_vectors(self) -> bool:
        if self.embedder is None:
            return False
        with self.db.transaction() as conn:
            index.lock_log(conn)  # one process (re)creates the tables at a time
            created = index.ensure_vector_tables(
                conn, self.embedder.model_name, self.embedder.dim, self._pgvector
            )
        self._vectors_checked = True
        return created

    def vectors_unavailable(self) -> str | None:
        if self.embedder is None:
            return "no embedding model"
        if time.monotonic() < self._index_ready_until:  # asked every turn; a round trip
            return None
        with self.db.connection() as conn:
            ready = index.vector_index_ready(
                conn, self.embedder.model_name, self.embedder.dim, self._pgvector
            )
        if not ready:
            return (
                "the vector index does not match the embedding model (run `mnemo memory reindex`)"
            )
        self._index_ready_until = time.monotonic() + INDEX_READY_TTL_S
        return None

    def _vector_model(self) -> str | None:
        if self.embedder is None:
            return None
        if not self._vectors_checked:
            self.prepare_vectors()
        return self.embedder.model_name

    def _embedding_for(
        self, content: str, given: Vector | None, context: str = ""
    ) -> Vector | None:
        if self._vector_model() is None or self.embedder is None:
            return None
        if given is not None:
            if len(given) != self.embedder.dim:
                raise InputError(
                    f"embedding has {len(given)} dims; the index holds {self.embedder.dim}"
                )
            return given
        return self.embedder.embed([embedding_text(content, context)])[0]

    def _write_vectors(self, conn: Any, rows: list[tuple[int, int | None, Vector]]) -> None:
        assert self.embedder is not None
        index.store_vectors(conn, rows, self.embedder.model_name, self._pgvector)

    # -- writes ------------------------------------------------------------------------

    def add(
        self,
        chat_id: int | None,
        content: str,
        category: str,
        *,
        source: str,
        confidence: float = 0.7,
        expires_at: str | None = None,
        embedding: Vector | None = None,
        context: str = "",
        sender_id: str = "",
        sender_name: str = "",
    ) -> int:
        """Store a memory (its row; its vector when an embedder is set); return its id."""
        text = clean_content(content)
        values = (clean_category(category), check_confidence(confidence), clean_expiry(expires_at))
        around = " ".join(str(context).split())[:MAX_CONTENT_CHARS]
        vector = self._embedding_for(text, embedding, around)
        with self.db.transaction() as conn:
            row = conn.execute(
                "INSERT INTO memories (chat_id, content, category, confidence, source,"
                " expires_at, context, sender_id, sender_name)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                (chat_id, text, *values[:2], source, values[2], around, sender_id, sender_name),
            ).fetchone()
            memory_id = int(row[0])
            if vector is not None:
                self._write_vectors(conn, [(memory_id, chat_id, vector)])
        return memory_id

    def update(self, memory_id: int, content: str, embedding: Vector | None = None) -> None:
        text = clean_content(content)
        memory = self._require(memory_id)
        vector = (
            self._embedding_for(text, embedding, memory.context) if not memory.archived else None
        )
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE memories SET content = %s, updated_at = mnemo_now(),"
                " last_seen_at = mnemo_now(), embedding_model = NULL WHERE id = %s",
                (text, memory_id),
            )
            if memory.archived:
                return
            if vector is not None:
                self._write_vectors(conn, [(memory_id, memory.chat_id, vector)])
            elif tables := self._vector_tables():  # the old text's vector must not linger
                index.drop_vector(conn, memory_id, with_knn_table=tables == 2)

    def touch(self, memory_id: int, confidence: float | None = None) -> None:
        self._require(memory_id)
        if confidence is None:
            self.db.write(
                "UPDATE memories SET last_seen_at = mnemo_now() WHERE id = %s", (memory_id,)
            )
        else:
            self.db.write(
                "UPDATE memories SET last_seen_at = mnemo_now(), confidence = %s WHERE id = %s",
                (check_confidence(confidence), memory_id),
            )

    def archive(self, memory_id: int) -> None:
        """Keep the memory but never rank it again (its vectors go)."""
        self._require(memory_id)
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE memories SET archived = 1, updated_at = mnemo_now() WHERE id = %s",
                (memory_id,),
            )
            if tables := self._vector_tables():
                index.drop_vector(conn, memory_id, with_knn_table=tables == 2)

    def _vector_tables(self) -> int:
        """How many vector tables exist (any process may have made them): 0, 1 (floats
        only) or 2 (floats and pgvector's)."""
        with self.db.connection() as conn:
            return index.index_state(conn)[1]

    def delete(self, memory_id: int) -> None:
        """Remove a memory; its vectors go with it (ON DELETE CASCADE)."""
        with self.db.transaction() as conn:
            conn.execute(
                "DELETE FROM memory_supersede_edges WHERE old_id = %s OR new_id = %s",
                (memory_id, memory_id),
            )
            conn.execute("DELETE FROM memories WHERE id = %s", (memory_id,))

    def forget_chat(self, chat_id: int) -> int:
        with self.db.transaction() as conn:
            ids = [
                int(row[0])
                for row in conn.execute("SELECT id FROM memories WHERE chat_id = %s", (chat_id,))
            ]
            conn.execute(
                "DELETE FROM memory_supersede_edges WHERE old_id = ANY(%s) OR new_id = ANY(%s)",
                (ids, ids),
            )
            conn.execute("DELETE FROM memories WHERE chat_id = %s", (chat_id,))
            index.forget_scope_log(conn, chat_id)
            tombstones.forget_scope(conn, chat_id)
        return len(ids)

    def forget(self, memory_id: int, *, forgotten_by: str, speaker: str = "") -> None:
        memory = self._require(memory_id)
        with self.db.transaction() as conn:
            tombstones.bury(conn, memory, forgotten_by, speaker)
            self.delete(memory_id)
        if not self.db.in_transaction():
            self.db.vacuum(("memories",))  # its dead row out of the table and its indexes

    def tombstones(self, chat_id: int | None) -> Tombstones:
        with self.db.connection() as conn:
            return tombstones.of_scope(conn, chat_id)

    def lift_tombstones(self, tombstone_ids: Sequence[int]) -> None:
        with self.db.transaction() as conn:
            tombstones.lift(conn, tombstone_ids)

    def record_note_change(self, change: NoteChange) -> None:
        self.db.write(note_store.postgresql(note_store.RECORD), note_store.record_params(change))

    def note_changes(self, chat_id: int, limit: int) -> list[NoteChange]:
        rows = self.db.read(note_store.postgresql(note_store.OF_CHAT), (chat_id, limit))
        return note_store.changes_from_rows(rows)

    def supersede(self, old_id: int, new_id: int) -> None:
        with self.db.transaction() as conn:
            self.archive(old_id)
            conn.execute(
                "INSERT INTO memory_supersede_edges (old_id, new_id) VALUES (%s, %s)"
                " ON CONFLICT DO NOTHING",
                (old_id, new_id),
            )

    # -- reads -------------------------------------------------------------------------

    def get(self, memory_id: int) -> Memory | None:
        if not 0 < memory_id <= MAX_MEMORY_ID:
            return None
        row = self.db.read_one(f"SELECT {_COLUMNS} FROM memories WHERE id = %s", (memory_id,))
        return memory_from_row(row) if row else None

    def _require(self, memory_id: int) -> Memory:
        memory = self.get(memory_id)
        if memory is None:
            raise InputError(f"no memory with id {memory_id}")
        return memory

    def list(
        self, chat_id: int | None, *, include_global: bool = True, include_archived: bool = False
    ) -> Memories:
        params: tuple[Any, ...]
        if chat_id is None:
            scope, params = "chat_id IS NULL", ()
        elif include_global:
            scope, params = index.scope_sql(chat_id)
        else:
            scope, params = "chat_id = %s", (chat_id,)
        active = "" if include_archived else " AND archived = 0"
        rows = self.db.read(
            f"SELECT {_COLUMNS} FROM memories WHERE {scope}{active} ORDER BY id", params
        )
        return [memory_from_row(row) for row in rows]

    def by_ids(self, ids: Sequence[int]) -> dict[int, Memory]:
        wanted = [int(i) for i in ids if 0 < int(i) <= MAX_MEMORY_ID]
        if not wanted:
            return {}
        rows = self.db.read(f"SELECT {_COLUMNS} FROM memories WHERE id = ANY(%s)", (wanted,))
        return {int(row[0]): memory_from_row(row) for row in rows}

    def count_active(self, chat_id: int | None = None, *, with_global: bool = False) -> int:
        if chat_id is None and not with_global:
            row = self.db.read_one("SELECT count(*) FROM memories WHERE archived = 0")
        else:
            scope, params = index.scope_sql(chat_id)
            row = self.db.read_one(
                f"SELECT count(*) FROM memories WHERE {scope} AND {_ACTIVE}", (*params, now_iso())
            )
        assert row is not None
        return int(row[0])

    def newest(self, chat_id: int, limit: int) -> Memories:
        rows = self.db.read(
            f"SELECT {_COLUMNS} FROM memories WHERE chat_id = %s AND archived = 0"
            " ORDER BY id DESC LIMIT %s",
            (chat_id, limit),
        )
        return [memory_from_row(row) for row in rows]

    def matching(self, chat_id: int, text: str, limit: int) -> Memories:
        """The chat's own active memories sharing words with `text` (PostgreSQL full-text
        search, the reflector's known-memory lookup), best first."""
        with self.db.connection() as conn:
            ids = index.matching_ids(conn, chat_id, text, limit)
        found = self.by_ids(ids)
        return [found[memory_id] for memory_id in ids if memory_id in found]

    def find_near_duplicate(
        self,
        chat_id: int | None,
        content: str,
        *,
        embedding: Vector | None = None,
        max_cosine_distance: float = 0.15,
        min_jaccard: float = 0.5,
        method: str = "auto",
    ) -> Memory | None:
        """An active memory of exactly this scope saying nearly the same thing, if any."""
        if method != "jaccard" and self._vector_model() is not None:
            vector = self._embedding_for(content, embedding)
            assert vector is not None
            with self.db.connection() as conn:
                near = index.nearest(conn, [scope_of(chat_id)], vector, 5, self._pgvector)
            close = [memory_id for memory_id, distance in near if distance <= max_cosine_distance]
            found = self.by_ids(close)
            for memory_id in close:
                memory = found.get(memory_id)
                if memory is not None and memory.chat_id == chat_id and not memory.archived:
                    return memory
            return None
        if method == "cosine":
            return None
        wanted = tokens(content)
        best: tuple[float, Memory] | None = None
        for memory in self.list(chat_id, include_global=False):
            if memory.chat_id != chat_id:
                continue
            score = jaccard_sets(wanted, tokens(memory.content))
            if score >= min_jaccard and (best is None or score > best[0]):
                best = (score, memory)
        return best[1] if best else None

    # -- what ranking reads ------------------------------------------------------------

    def ranking_rows(
        self, chat_id: int | None, memory_ids: Sequence[int] | None = None
    ) -> RankingRows:
        scope, params = index.scope_sql(chat_id)
        sql = f"SELECT id, content, context FROM memories WHERE {scope} AND {_ACTIVE}"
        values: tuple[Any, ...] = (*params, now_iso())
        if memory_ids is not None:
            sql += " AND id = ANY(%s)"
            values += ([int(i) for i in memory_ids],)
        rows = self.db.read(sql + " ORDER BY id", values)
        return [(int(row[0]), str(row[1]), str(row[2] or "")) for row in rows]

    def vector_rows(
        self, chat_id: int | None, memory_ids: Sequence[int] | None = None
    ) -> VectorRows:
        if self.embedder is None:
            return []
        with self.db.connection() as conn:
            if index.index_state(conn)[1] == 0:
                return []
            return index.vector_rows(conn, chat_id, self.embedder.model_name, now_iso(), memory_ids)

    @property
    def cache_key(self) -> object:
        return self.db

    def in_transaction(self) -> bool:
        return self.db.in_transaction()

    def change_log_end(self) -> int:
        with self.db.connection() as conn:
            return index.log_end(conn)

    def changes_since(self, chat_id: int | None, marks: Marks) -> Changes | None:
        with self.db.connection() as conn:
            return index.changes_since(conn, chat_id, marks)

    def prune_change_log(self) -> int:
        with self.db.transaction() as conn:
            return index.prune_log(conn)

    # -- upkeep ------------------------------------------------------------------------

    def stale_ids(self, confidence_floor: float, days: int, limit: int) -> Ids:
        cutoff = iso_utc(utc_now() - timedelta(days=int(days)))
        rows = self.db.read(
            "SELECT id FROM memories WHERE archived = 0 AND confidence < %s"
            " AND last_seen_at < %s LIMIT %s",
            (confidence_floor, cutoff, limit),
        )
        return [int(row[0]) for row in rows]

    def expired_ids(self, limit: int) -> Ids:
        rows = self.db.read(
            "SELECT id FROM memories WHERE expires_at IS NOT NULL AND expires_at <= %s LIMIT %s",
            (now_iso(), limit),
        )
        return [int(row[0]) for row in rows]

    def has_unembedded(self) -> bool:
        row = self.db.read_one(
            "SELECT 1 FROM memories WHERE archived = 0 AND embedding_model IS NULL LIMIT 1"
        )
        return row is not None

    def embed_missing(self, limit: int = 500, progress: Callable[[int], None] | None = None) -> int:
        """Embed up to `limit` active memories that have no vector of the current model."""
        model = self._vector_model()
        if model is None or self.embedder is None:
            return 0
        rows = self.db.read(
            "SELECT id, chat_id, content, context FROM memories WHERE archived = 0"
            " AND (embedding_model IS NULL OR embedding_model != %s) ORDER BY id LIMIT %s",
            (model, limit),
        )
        for start in range(0, len(rows), 256):
            batch = rows[start : start + 256]
            vectors = self.embedder.embed([embedding_text(row[2], row[3]) for row in batch])
            with self.db.transaction() as conn:
                self._write_vectors(
                    conn,
                    [
                        (int(row[0]), row[1], vector)
                        for row, vector in zip(batch, vectors, strict=True)
                    ],
                )
            if progress is not None:
                progress(len(batch))
        return len(rows)

    def count_missing_vectors(self) -> int:
        model = self.embedder.model_name if self.embedder else ""
        row = self.db.read_one(
            "SELECT count(*) FROM memories WHERE archived = 0"
            " AND (embedding_model IS NULL OR embedding_model != %s)",
            (model,),
        )
        assert row is not None
        return int(row[0])

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Re-embed every memory (PostgreSQL keeps its full-text index itself)."""
        if self._vector_model() is not None:
            with self.db.transaction() as conn:
                index.clear_vectors(conn, self._pgvector)
        total = 0
        while True:
            done = self.embed_missing(limit=1000, progress=progress)
            total += done
            if done == 0:
                return total
