"""SqliteMemoryStore: the `MemoryStore` on SQLite, with FTS5 and sqlite-vec indexes.

Every write keeps the FTS5 row and, when sqlite-vec and an embedder are available, the
vector row in step with the `memories` row, inside the caller's transaction if one is open.
The index and change-log statements themselves are in `memory.index_store`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from core.db import Connection, scrub_deleted, transaction
from core.errors import InputError
from memory import index_store as index
from memory import note_store, tombstone_store
from memory.embeddings import Embedder
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

NOW_SQL = index.NOW_SQL
_COLUMNS = (
    "id, chat_id, content, category, confidence, source, created_at, updated_at,"
    " last_seen_at, archived, expires_at, embedding_model, context, sender_id, sender_name"
)


class SqliteMemoryStore:
    """All reads and writes of structured memories on one SQLite connection."""

    def __init__(self, conn: Connection, embedder: Embedder | None = None) -> None:
        self.conn = conn
        self.embedder = embedder
        self._vectors_checked = False

    def transaction(self) -> AbstractContextManager[Any]:
        return transaction(self.conn)

    def with_embedder(self, embedder: Embedder | None) -> SqliteMemoryStore:
        return SqliteMemoryStore(self.conn, embedder)

    # -- vectors -----------------------------------------------------------------------

    @property
    def vectors_enabled(self) -> bool:
        return self.embedder is not None and self.conn.info.vec_loaded

    def prepare_vectors(self) -> bool:
        if self.embedder is None or not self.conn.info.vec_loaded:
            return False
        with transaction(self.conn):
            created = index.ensure_vector_table(
                self.conn, self.embedder.model_name, self.embedder.dim
            )
        self._vectors_checked = True
        return created

    def vectors_unavailable(self) -> str | None:
        if not self.conn.info.vec_loaded:
            return "sqlite-vec is not loaded"
        if self.embedder is None:
            return "no embedding model"
        if not index.vector_index_ready(self.conn, self.embedder.model_name, self.embedder.dim):
            return (
                "the vector index does not match the embedding model (run `mnemo memory reindex`)"
            )
        return None

    def _vector_model(self) -> str | None:
        """The model name vectors are stored for, after making sure the table fits it."""
        if self.embedder is None or not self.conn.info.vec_loaded:
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
        return self.embedder.embed([index.embedding_text(content, context)])[0]

    def _write_vector(self, memory_id: int, chat_id: int | None, vector: Vector) -> None:
        assert self.embedder is not None
        index.store_vector(self.conn, memory_id, chat_id, vector)
        index.set_embedding_model(self.conn, memory_id, self.embedder.model_name)

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
        """Store a memory (row, FTS row, vector row when possible); return its id.

        `context` (e.g. the message before the fact) helps ranking find the memory: it is
        indexed with a lower weight and embedded with the content, but never injected.
        `sender_id` / `sender_name`: who asked for it in a group.
        """
        text = clean_content(content)
        values = (clean_category(category), check_confidence(confidence), clean_expiry(expires_at))
        around = " ".join(str(context).split())[:MAX_CONTENT_CHARS]
        vector = self._embedding_for(text, embedding, around)
        with transaction(self.conn):
            cursor = self.conn.execute(
                "INSERT INTO memories (chat_id, content, category, confidence, source,"
                " expires_at, context, sender_id, sender_name) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (chat_id, text, *values[:2], source, values[2], around, sender_id, sender_name),
            )
            memory_id = int(cursor.lastrowid)
            index.index_keywords(self.conn, memory_id, chat_id, text, around)
            if vector is not None:
                self._write_vector(memory_id, chat_id, vector)
        return memory_id

    def update(self, memory_id: int, content: str, embedding: Vector | None = None) -> None:
        """Replace a memory's content (and re-index it)."""
        text = clean_content(content)
        memory = self._require(memory_id)
        vector = (
            self._embedding_for(text, embedding, memory.context) if not memory.archived else None
        )
        with transaction(self.conn):
            self.conn.execute(
                f"UPDATE memories SET content = ?, updated_at = {NOW_SQL},"
                f" last_seen_at = {NOW_SQL}, embedding_model = NULL WHERE id = ?",
                (text, memory_id),
            )
            if memory.archived:
                return
            index.index_keywords(self.conn, memory_id, memory.chat_id, text, memory.context)
            if vector is not None:
                self._write_vector(memory_id, memory.chat_id, vector)
            elif index.vector_table_exists(self.conn) and self.conn.info.vec_loaded:
                index.drop_vector(self.conn, memory_id)

    def touch(self, memory_id: int, confidence: float | None = None) -> None:
        """Mark a memory as seen again now (optionally with a new confidence)."""
        self._require(memory_id)
        if confidence is None:
            self.conn.execute(
                f"UPDATE memories SET last_seen_at = {NOW_SQL} WHERE id = ?", (memory_id,)
            )
        else:
            self.conn.execute(
                f"UPDATE memories SET last_seen_at = {NOW_SQL}, confidence = ? WHERE id = ?",
                (check_confidence(confidence), memory_id),
            )

    def archive(self, memory_id: int) -> None:
        """Keep the memory but never rank it again."""
        self._require(memory_id)
        with transaction(self.conn):
            self.conn.execute(
                f"UPDATE memories SET archived = 1, updated_at = {NOW_SQL} WHERE id = ?",
                (memory_id,),
            )
            index.unindex(self.conn, memory_id)

    def delete(self, memory_id: int) -> None:
        with transaction(self.conn):
            index.unindex(self.conn, memory_id)
            self.conn.execute("DELETE FROM memories WHERE id = ?", (memory_id,))

    def forget_chat(self, chat_id: int) -> int:
        with transaction(self.conn):
            rows = self.conn.execute("SELECT id FROM memories WHERE chat_id = ?", (chat_id,))
            ids = [int(row[0]) for row in rows]
            index.unindex_all(self.conn, ids)
            self.conn.execute("DELETE FROM memories WHERE chat_id = ?", (chat_id,))
            index.forget_scope_log(self.conn, chat_id)
            tombstone_store.forget_scope(self.conn, chat_id)
        return len(ids)

    def forget(self, memory_id: int, *, forgotten_by: str, speaker: str = "") -> None:
        memory = self._require(memory_id)
        with transaction(self.conn):
            tombstone_store.bury(self.conn, memory, forgotten_by, speaker)
            self.delete(memory_id)
        scrub_deleted(self.conn)  # the WAL's older copies of it (no-op inside a transaction)

    def tombstones(self, chat_id: int | None) -> Tombstones:
        return tombstone_store.of_scope(self.conn, chat_id)

    def lift_tombstones(self, tombstone_ids: Sequence[int]) -> None:
        with transaction(self.conn):
            tombstone_store.lift(self.conn, tombstone_ids)

    def record_note_change(self, change: NoteChange) -> None:
        self.conn.execute(note_store.RECORD, note_store.record_params(change))

    def note_changes(self, chat_id: int, limit: int) -> list[NoteChange]:
        rows = self.conn.execute(note_store.OF_CHAT, (chat_id, limit)).fetchall()
        return note_store.changes_from_rows(rows)

    def supersede(self, old_id: int, new_id: int) -> None:
        with transaction(self.conn):
            self.archive(old_id)
            self.conn.execute(
                "INSERT OR IGNORE INTO memory_supersede_edges (old_id, new_id) VALUES (?, ?)",
                (old_id, new_id),
            )

    # -- reads -------------------------------------------------------------------------

    def get(self, memory_id: int) -> Memory | None:
        if not 0 < memory_id <= MAX_MEMORY_ID:  # SQLite cannot even compare a larger int
            return None
        row = self.conn.execute(
            f"SELECT {_COLUMNS} FROM memories WHERE id = ?", (memory_id,)
        ).fetchone()
        return memory_from_row(row) if row else None

    def _require(self, memory_id: int) -> Memory:
        memory = self.get(memory_id)
        if memory is None:
            raise InputError(f"no memory with id {memory_id}")
        return memory

    def list(
        self, chat_id: int | None, *, include_global: bool = True, include_archived: bool = False
    ) -> Memories:
        """The chat's memories (and global ones), oldest first."""
        scope = "chat_id IS ?" + (" OR chat_id IS NULL" if include_global else "")
        active = "" if include_archived else " AND archived = 0"
        rows = self.conn.execute(
            f"SELECT {_COLUMNS} FROM memories WHERE ({scope}){active} ORDER BY id", (chat_id,)
        ).fetchall()
        return [memory_from_row(row) for row in rows]

    def by_ids(self, ids: Sequence[int]) -> dict[int, Memory]:
        found: dict[int, Memory] = {}
        for start in range(0, len(ids), 500):
            chunk = tuple(ids[start : start + 500])
            marks = ", ".join("?" for _ in chunk)
            rows = self.conn.execute(
                f"SELECT {_COLUMNS} FROM memories WHERE id IN ({marks})", chunk
            ).fetchall()
            found.update((row[0], memory_from_row(row)) for row in rows)
        return found

    def count_active(self, chat_id: int | None = None, *, with_global: bool = False) -> int:
        if chat_id is None and not with_global:
            row = self.conn.execute("SELECT count(*) FROM memories WHERE archived = 0")
            return int(row.fetchone()[0])
        row = self.conn.execute(
            "SELECT count(*) FROM memories WHERE (chat_id IS ? OR chat_id IS NULL)"
            f" AND {index.ACTIVE_SQL}",
            (chat_id,),
        )
        return int(row.fetchone()[0])

    def newest(self, chat_id: int, limit: int) -> Memories:
        rows = self.conn.execute(
            f"SELECT {_COLUMNS} FROM memories WHERE chat_id = ? AND archived = 0"
            " ORDER BY id DESC LIMIT ?",
            (chat_id, limit),
        ).fetchall()
        return [memory_from_row(row) for row in rows]

    def matching(self, chat_id: int, text: str, limit: int) -> Memories:
        ids = index.fts_matching_ids(self.conn, chat_id, text, limit)
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
        """An active memory of exactly this scope saying nearly the same thing, if any.

        `method` "auto" uses cosine distance when vectors exist, else Jaccard; "jaccard"
        or "cosine" force one.
        """
        if method != "jaccard" and self._vector_model() is not None:
            vector = self._embedding_for(content, embedding)
            assert vector is not None
            for memory_id, distance in index.nearest(self.conn, [scope_of(chat_id)], vector, 5):
                memory = self.get(memory_id)
                if distance > max_cosine_distance:
                    break
                if memory is not None and memory.chat_id == chat_id and not memory.archived:
                    return memory
            return None
        if method == "cosine":
            return None
        return self._jaccard_duplicate(chat_id, content, min_jaccard)

    def _jaccard_duplicate(
        self, chat_id: int | None, content: str, min_jaccard: float
    ) -> Memory | None:
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
        return index.ranking_rows(self.conn, chat_id, memory_ids)

    def vector_rows(
        self, chat_id: int | None, memory_ids: Sequence[int] | None = None
    ) -> VectorRows:
        if self.vectors_unavailable() is not None:
            return []
        return index.vector_rows(self.conn, chat_id, memory_ids)

    @property
    def cache_key(self) -> object:
        return self.conn

    def in_transaction(self) -> bool:
        return bool(self.conn.in_transaction)

    def change_log_end(self) -> int:
        return index.log_end(self.conn)

    def changes_since(self, chat_id: int | None, marks: Marks) -> Changes | None:
        return index.changes_since(self.conn, chat_id, marks)

    def prune_change_log(self) -> int:
        return index.prune_log(self.conn)

    # -- upkeep ------------------------------------------------------------------------

    def stale_ids(self, confidence_floor: float, days: int, limit: int) -> Ids:
        """Active memories below the floor that nobody has seen for `days` days."""
        rows = self.conn.execute(
            "SELECT id FROM memories WHERE archived = 0 AND confidence < ?"
            " AND last_seen_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?) LIMIT ?",
            (confidence_floor, f"-{int(days)} days", limit),
        ).fetchall()
        return [int(row[0]) for row in rows]

    def expired_ids(self, limit: int) -> Ids:
        rows = self.conn.execute(
            f"SELECT id FROM memories WHERE expires_at IS NOT NULL AND expires_at <= {NOW_SQL}"
            " LIMIT ?",
            (limit,),
        ).fetchall()
        return [int(row[0]) for row in rows]

    def has_unembedded(self) -> bool:
        """Whether some active memory has no vector yet (cheap: stops at the first)."""
        row = self.conn.execute(
            "SELECT 1 FROM memories WHERE archived = 0 AND embedding_model IS NULL LIMIT 1"
        ).fetchone()
        return row is not None

    def embed_missing(self, limit: int = 500, progress: Callable[[int], None] | None = None) -> int:
        """Embed up to `limit` active memories that have no vector of the current model."""
        model = self._vector_model()
        if model is None or self.embedder is None:
            return 0
        rows = self.conn.execute(
            "SELECT id, chat_id, content, context FROM memories WHERE archived = 0"
            " AND (embedding_model IS NULL OR embedding_model != ?) ORDER BY id LIMIT ?",
            (model, limit),
        ).fetchall()
        for start in range(0, len(rows), 256):
            batch = rows[start : start + 256]
            vectors = self.embedder.embed([index.embedding_text(row[2], row[3]) for row in batch])
            with transaction(self.conn):
                for (memory_id, chat_id, _, _), vector in zip(batch, vectors, strict=True):
                    self._write_vector(memory_id, chat_id, vector)
            if progress is not None:
                progress(len(batch))
        return len(rows)

    def count_missing_vectors(self) -> int:
        model = self.embedder.model_name if self.embedder else ""
        return int(
            self.conn.execute(
                "SELECT count(*) FROM memories WHERE archived = 0"
                " AND (embedding_model IS NULL OR embedding_model != ?)",
                (model,),
            ).fetchone()[0]
        )

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the keyword index and every vector; return how many memories were embedded."""
        with transaction(self.conn):
            index.rebuild_keywords(self.conn)
            if self._vector_model() is not None:
                index.clear_vectors(self.conn)
        total = 0
        while True:
            done = self.embed_missing(limit=1000, progress=progress)
            total += done
            if done == 0:
                return total
