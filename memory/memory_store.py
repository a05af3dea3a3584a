"""DatabaseMemoryStore: the `MemoryStore` on either engine, one SQL text over
`core.storage.database`; its derived indexes (full text, vectors, the change log) are a
`memory.memory_index`.

Every write keeps the index rows in step with the `memories` row, inside the caller's
transaction if one is open. Vectors are written when an embedder is set (and, on SQLite,
sqlite-vec is loaded); ranking scores a chat's vectors in this process (`memory.vector_cache`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any, TypeVar, Unpack

from core.clock import iso_utc, now_iso, utc_now
from core.errors import InputError
from core.storage.database import Database
from memory import change_log_store, note_store, rank_snapshot_store, tombstone_store
from memory.embeddings import Embedder
from memory.memory_index import MemoryIndex, memory_index
from memory.snapshot_reader import SnapshotReader
from memory.sqlite_index import embedding_text
from memory.store import (
    MAX_CONTENT_CHARS,
    MAX_MEMORY_ID,
    Changes,
    DuplicateTest,
    Ids,
    Marks,
    Memories,
    Memory,
    MemoryFields,
    NewMemory,
    NoteChange,
    RankingRows,
    RankSnapshot,
    RankText,
    RankTexts,
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

_COLUMNS = (
    "id, chat_id, content, category, confidence, source, created_at, updated_at,"
    " last_seen_at, archived, expires_at, embedding_model, context, sender_id, sender_name"
)
_M_COLUMNS = ", ".join("m." + column.strip() for column in _COLUMNS.split(","))
_RANK_COLUMNS = "id, chat_id, content, created_at"  # a `RankText`
_RANK_M_COLUMNS = "m.id, m.chat_id, m.content, m.created_at"
_ACTIVE = "archived = 0 AND (expires_at IS NULL OR expires_at > ?)"
_CHUNK = 500  # ids per statement (SQLite binds each one)
_Row = TypeVar("_Row")  # what `_rows_by_ids` makes of a row


def _scope(chat_id: int | None) -> tuple[str, tuple[Any, ...]]:
    """The chat's own and the global rows (index-friendly: no IS NOT DISTINCT FROM)."""
    if chat_id is None:
        return "chat_id IS NULL", ()
    return "(chat_id = ? OR chat_id IS NULL)", (chat_id,)


class DatabaseMemoryStore:
    """All reads and writes of structured memories on a `Database`."""

    def __init__(
        self, db: Database, embedder: Embedder | None = None, index: MemoryIndex | None = None
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.index = index or memory_index(db)
        self._vectors_checked = False
        self._snapshots = SnapshotReader(db)

    def transaction(self) -> AbstractContextManager[Any]:
        return self.db.transaction()

    def with_embedder(self, embedder: Embedder | None) -> DatabaseMemoryStore:
        return DatabaseMemoryStore(self.db, embedder, self.index)

    # -- vectors -----------------------------------------------------------------------

    @property
    def vectors_enabled(self) -> bool:
        return self.embedder is not None and self.index.missing_extension() is None

    def prepare_vectors(self) -> bool:
        if not self.vectors_enabled or self.embedder is None:
            return False
        created = self.index.prepare(self.embedder.model_name, self.embedder.dim)
        self._vectors_checked = True
        return created

    def vectors_unavailable(self) -> str | None:
        missing = self.index.missing_extension()
        if missing is not None:
            return missing
        if self.embedder is None:
            return "no embedding model"
        if not self.index.ready(self.embedder.model_name, self.embedder.dim):
            return (
                "the vector index does not match the embedding model (run `mnemo memory reindex`)"
            )
        return None

    def _vector_model(self) -> str | None:
        """The model name vectors are stored for, after making sure the tables fit it."""
        if not self.vectors_enabled or self.embedder is None:
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

    def _write_vectors(self, rows: list[tuple[int, int | None, Vector]]) -> None:
        assert self.embedder is not None
        self.index.write_vectors(rows, self.embedder.model_name)

    # -- writes ------------------------------------------------------------------------

    def add(
        self, chat_id: int | None, content: str, category: str, **fields: Unpack[MemoryFields]
    ) -> int:
        """Store a memory (its row, its index rows, its vector when possible); its id.

        `context` (e.g. the message before the fact) helps ranking find the memory: it is
        indexed with a lower weight and embedded with the content, but never injected.
        `sender_id` / `sender_name`: who asked for it in a group.
        """
        if unknown := set(fields) - set(MemoryFields.__annotations__):
            raise TypeError(f"add() got unexpected keyword arguments {sorted(unknown)}")
        if "source" not in fields:
            raise TypeError("add() missing required keyword argument: 'source'")
        return self.add_many([NewMemory(chat_id, content, category, **fields)])[0]

    def add_many(self, items: Sequence[NewMemory]) -> Ids:
        """Store memories in one transaction; their ids, in order. Every input is checked
        before anything is written; those without a vector are embedded in one call. The
        rows are one batch (`Database.write_returning`: one round trip on PostgreSQL) with
        their `embedding_model` set, and their vectors one write of new rows (PostgreSQL:
        `COPY`, no upsert, no second pass over `memories`)."""
        rows = [_insert_values(item) for item in items]
        vectors = self._embeddings_of(items, [row[6] for row in rows])
        model = self._vector_model() if any(v is not None for v in vectors) else None
        if not rows:
            return []
        with self.db.transaction():
            found = self.db.write_returning(
                "INSERT INTO memories (chat_id, content, category, confidence, source,"
                " expires_at, context, sender_id, sender_name, embedding_model)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                [(*row, model if vector is not None else None)
                 for row, vector in zip(rows, vectors, strict=True)],
            )  # fmt: skip
            ids = [int(row[0]) for row in found]
            for memory_id, row in zip(ids, rows, strict=True):
                self.index.keep_keywords(memory_id, row[0], row[1], row[6])
            fresh = [
                (i, row[0], v)
                for i, row, v in zip(ids, rows, vectors, strict=True)
                if v is not None
            ]
            if fresh and model is not None:
                self.index.write_vectors(fresh, model, new_rows=True)
        return ids

    def _embeddings_of(
        self, items: Sequence[NewMemory], contexts: list[str]
    ) -> list[Vector | None]:
        """Each item's vector: its own (checked), else embedded (all in one call), else None
        when this store keeps no vectors."""
        if self._vector_model() is None or self.embedder is None:
            return [None] * len(items)
        missing = [n for n, item in enumerate(items) if item.embedding is None]
        made = self.embedder.embed(
            [embedding_text(clean_content(items[n].content), contexts[n]) for n in missing]
        ) if missing else []  # fmt: skip
        vectors: list[Vector | None] = [item.embedding for item in items]
        for n, vector in zip(missing, made, strict=True):
            vectors[n] = vector
        for checked in vectors:
            if checked is not None and len(checked) != self.embedder.dim:
                raise InputError(
                    f"embedding has {len(checked)} dims; the index holds {self.embedder.dim}"
                )
        return vectors

    def update(self, memory_id: int, content: str, embedding: Vector | None = None) -> None:
        """Replace a memory's content (and re-index it)."""
        text = clean_content(content)
        memory = self._require(memory_id)
        vector = (
            self._embedding_for(text, embedding, memory.context) if not memory.archived else None
        )
        with self.db.transaction():
            self.db.write(
                "UPDATE memories SET content = ?, updated_at = mnemo_now(),"
                " last_seen_at = mnemo_now(), embedding_model = NULL WHERE id = ?",
                (text, memory_id),
            )
            if memory.archived:
                return
            self.index.keep_keywords(memory_id, memory.chat_id, text, memory.context)
            if vector is not None:
                self._write_vectors([(memory_id, memory.chat_id, vector)])
            else:  # the old text's vector must not linger
                self.index.drop_vector(memory_id)

    def touch(self, memory_id: int, confidence: float | None = None) -> None:
        """Mark a memory as seen again now (optionally with a new confidence)."""
        self._require(memory_id)
        if confidence is None:
            self.db.write(
                "UPDATE memories SET last_seen_at = mnemo_now() WHERE id = ?", (memory_id,)
            )
        else:
            self.db.write(
                "UPDATE memories SET last_seen_at = mnemo_now(), confidence = ? WHERE id = ?",
                (check_confidence(confidence), memory_id),
            )

    def archive(self, memory_id: int) -> None:
        """Keep the memory but never rank it again (it leaves the indexes)."""
        self._require(memory_id)
        with self.db.transaction():
            self.db.write(
                "UPDATE memories SET archived = 1, updated_at = mnemo_now() WHERE id = ?",
                (memory_id,),
            )
            self.index.unindex(memory_id)

    def delete(self, memory_id: int) -> None:
        """Remove a memory, its index rows and its supersede links."""
        with self.db.transaction():
            self.index.deleting([memory_id])
            self.db.write(
                "DELETE FROM memory_supersede_edges WHERE old_id = ? OR new_id = ?",
                (memory_id, memory_id),
            )
            self.db.write("DELETE FROM memories WHERE id = ?", (memory_id,))

    def forget_chat(self, chat_id: int) -> int:
        with self.db.transaction():
            rows = self.db.read("SELECT id FROM memories WHERE chat_id = ?", (chat_id,))
            ids = [int(row[0]) for row in rows]
            self.index.deleting(ids)
            for start in range(0, len(ids), _CHUNK):
                old, params = self.db.dialect.in_values("old_id", ids[start : start + _CHUNK])
                new, _ = self.db.dialect.in_values("new_id", ids[start : start + _CHUNK])
                self.db.write(
                    f"DELETE FROM memory_supersede_edges WHERE {old} OR {new}", params + params
                )
            self.db.write("DELETE FROM memories WHERE chat_id = ?", (chat_id,))
            change_log_store.forget_scope_log(self.db, chat_id)
            tombstone_store.forget_scope(self.db, chat_id)
            self.drop_rank_snapshots(chat_id)
        return len(ids)

    def forget(self, memory_id: int, *, forgotten_by: str, speaker: str = "") -> None:
        memory = self._require(memory_id)
        with self.db.transaction():
            tombstone_store.bury(self.db, memory, forgotten_by, speaker)
            self.delete(memory_id)
            # Saved ranking data holds its words and vector: it goes, and is saved again
            # without them (`memory.rank_snapshots.checkpoint`).
            self.drop_rank_snapshots(memory.chat_id, every_chat=memory.chat_id is None)
        # SQLite: the WAL's older copies of it; PostgreSQL: its dead row out of the table
        # and its indexes (both no-ops inside a transaction).
        self.db.scrub_deleted(("memories", "memory_rank_snapshots"))

    def tombstones(self, chat_id: int | None) -> Tombstones:
        return tombstone_store.of_scope(self.db, chat_id)

    def lift_tombstones(self, tombstone_ids: Sequence[int]) -> None:
        tombstone_store.lift(self.db, tombstone_ids)

    def record_note_change(self, change: NoteChange) -> None:
        self.db.write(note_store.RECORD, note_store.record_params(change))

    def note_changes(self, chat_id: int, limit: int) -> list[NoteChange]:
        rows = self.db.read(note_store.OF_CHAT, (chat_id, limit))
        return note_store.changes_from_rows(rows)

    def supersede(self, old_id: int, new_id: int) -> None:
        with self.db.transaction():
            self.archive(old_id)
            self.db.write(
                "INSERT INTO memory_supersede_edges (old_id, new_id) VALUES (?, ?)"
                " ON CONFLICT DO NOTHING",
                (old_id, new_id),
            )

    # -- reads -------------------------------------------------------------------------

    def get(self, memory_id: int) -> Memory | None:
        if not 0 < memory_id <= MAX_MEMORY_ID:  # SQLite cannot even compare a larger int
            return None
        row = self.db.read_one(f"SELECT {_COLUMNS} FROM memories WHERE id = ?", (memory_id,))
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
        params: tuple[Any, ...]
        if chat_id is None:
            scope, params = "chat_id IS NULL", ()
        elif include_global:
            scope, params = _scope(chat_id)
        else:
            scope, params = "chat_id = ?", (chat_id,)
        active = "" if include_archived else " AND archived = 0"
        rows = self.db.read(
            f"SELECT {_COLUMNS} FROM memories WHERE {scope}{active} ORDER BY id", params
        )
        return [memory_from_row(row) for row in rows]

    def by_ids(self, ids: Sequence[int]) -> dict[int, Memory]:
        """The memories among `ids`, in the order asked (ranking reads its candidates best
        first, and `memory.memory_candidates` reads their order from the dict)."""
        return self._rows_by_ids(ids, _COLUMNS, memory_from_row)

    def rank_texts(self, ids: Sequence[int]) -> dict[int, RankText]:
        return self._rows_by_ids(ids, _RANK_COLUMNS, lambda r: RankText(*r))

    def rank_texts_around(
        self, chat_id: int, ids: Sequence[int], seeds: Sequence[int]
    ) -> tuple[dict[int, RankText], dict[int, RankTexts]]:
        """`rank_texts(ids)` and, in the same statement (one round trip on PostgreSQL where
        two were two), the chat's own unarchived memories stored just before and after each
        of `seeds` (`adjacent_many`'s rows, as `RankText`s): seed -> them, oldest first."""
        wanted = [int(i) for i in ids if 0 < int(i) <= MAX_MEMORY_ID]
        around = list(dict.fromkeys(int(i) for i in seeds))[:_CHUNK]
        parts: list[str] = []
        params: list[Any] = []
        if wanted:
            among, values = self.db.dialect.in_values("id", wanted[:_CHUNK])
            parts.append(f"SELECT 0, {_RANK_COLUMNS} FROM memories WHERE {among}")
            params.extend(values)
        if around:
            parts.append(_around_sql(len(around), _RANK_M_COLUMNS))
            params.extend((*around, chat_id, chat_id))
        rows = self.db.read(" UNION ALL ".join(parts), tuple(params)) if parts else []
        texts: dict[int, RankText] = {}
        near: dict[int, RankTexts] = {}
        for row in rows:
            text = RankText(*row[1:])
            if row[0]:
                near.setdefault(int(row[0]), []).append(text)
            else:
                texts[text.id] = text
        texts.update(self.rank_texts(wanted[_CHUNK:]))
        for found in near.values():
            found.sort(key=lambda text: text.id)
        return {i: texts[i] for i in wanted if i in texts}, near

    def _rows_by_ids(
        self, ids: Sequence[int], columns: str, make: Callable[[Any], _Row]
    ) -> dict[int, _Row]:
        """`make(row)` of the rows among `ids` (`columns` start with `id`), in the order asked."""
        wanted = [int(i) for i in ids if 0 < int(i) <= MAX_MEMORY_ID]
        found: dict[int, _Row] = {}
        for start in range(0, len(wanted), _CHUNK):
            among, params = self.db.dialect.in_values("id", wanted[start : start + _CHUNK])
            rows = self.db.read(f"SELECT {columns} FROM memories WHERE {among}", params)
            found.update((int(row[0]), make(row)) for row in rows)
        return {memory_id: found[memory_id] for memory_id in wanted if memory_id in found}

    def count_active(self, chat_id: int | None = None, *, with_global: bool = False) -> int:
        if chat_id is None and not with_global:
            row = self.db.read_one("SELECT count(*) FROM memories WHERE archived = 0")
        else:
            scope, params = _scope(chat_id)
            row = self.db.read_one(
                f"SELECT count(*) FROM memories WHERE {scope} AND {_ACTIVE}", (*params, now_iso())
            )
        assert row is not None
        return int(row[0])

    def adjacent(self, chat_id: int, memory_id: int) -> Memories:
        return self.adjacent_many(chat_id, [memory_id]).get(memory_id, [])

    def adjacent_many(self, chat_id: int, memory_ids: Sequence[int]) -> dict[int, Memories]:
        """`adjacent` of each of `memory_ids` in one statement (one round trip on
        PostgreSQL, where five `adjacent` reads were five): id -> its neighbours, oldest
        first; an id without any is left out."""
        wanted = list(dict.fromkeys(int(i) for i in memory_ids))[:_CHUNK]
        if not wanted:
            return {}
        rows = self.db.read(
            _around_sql(len(wanted), _M_COLUMNS) + " ORDER BY 1, 2", (*wanted, chat_id, chat_id)
        )
        found: dict[int, Memories] = {}
        for row in rows:
            found.setdefault(int(row[0]), []).append(memory_from_row(row[1:]))
        return found

    def newest(self, chat_id: int, limit: int) -> Memories:
        rows = self.db.read(
            f"SELECT {_COLUMNS} FROM memories WHERE chat_id = ? AND archived = 0"
            " ORDER BY id DESC LIMIT ?",
            (chat_id, limit),
        )
        return [memory_from_row(row) for row in rows]

    def matching(self, chat_id: int, text: str, limit: int) -> Memories:
        """The chat's own active memories sharing words with `text` (the full-text index;
        the reflector's known-memory lookup), best first."""
        ids = self.index.matching_ids(chat_id, text, limit)
        found = self.by_ids(ids)
        return [found[memory_id] for memory_id in ids if memory_id in found]

    def find_near_duplicate(
        self, chat_id: int | None, content: str, **test: Unpack[DuplicateTest]
    ) -> Memory | None:
        """An active memory of exactly this scope saying nearly the same thing, if any.

        `method` "auto" uses cosine distance when vectors exist, else Jaccard; "jaccard"
        or "cosine" force one.
        """
        if unknown := set(test) - set(DuplicateTest.__annotations__):
            raise TypeError(f"find_near_duplicate() got unexpected arguments {sorted(unknown)}")
        method, embedding = test.get("method", "auto"), test.get("embedding")
        max_cosine_distance = test.get("max_cosine_distance", 0.15)
        min_jaccard = test.get("min_jaccard", 0.5)
        if method != "jaccard" and self._vector_model() is not None:
            vector = self._embedding_for(content, embedding)
            assert vector is not None
            near = self.index.nearest([scope_of(chat_id)], vector, 5)
            close = [memory_id for memory_id, distance in near if distance <= max_cosine_distance]
            found = self.by_ids(close)
            for memory_id in close:
                memory = found.get(memory_id)
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
        """The active memories a chat's queries rank (its own and global ones), or those of
        them among `memory_ids`."""
        scope, params = _scope(chat_id)
        sql = f"SELECT id, content, context FROM memories WHERE {scope} AND {_ACTIVE}"
        values: tuple[Any, ...] = (*params, now_iso())
        if memory_ids is None:
            return _texts(self.db.read(sql + " ORDER BY id", values))
        wanted = [int(i) for i in memory_ids]
        found: RankingRows = []
        for start in range(0, len(wanted), _CHUNK):
            among, ids = self.db.dialect.in_values("id", wanted[start : start + _CHUNK])
            found += _texts(self.db.read(f"{sql} AND {among} ORDER BY id", values + ids))
        return found

    def vector_rows(
        self, chat_id: int | None, memory_ids: Sequence[int] | None = None
    ) -> VectorRows:
        if self.embedder is None:
            return []
        return self.index.vector_rows(
            chat_id, self.embedder.model_name, self.embedder.dim, memory_ids
        )

    @property
    def cache_key(self) -> object:
        return self.index.cache_key

    def in_transaction(self) -> bool:
        return self.db.in_transaction()

    def change_log_end(self) -> int:
        return change_log_store.log_end(self.db)

    def changes_since(self, chat_id: int | None, marks: Marks) -> Changes | None:
        return change_log_store.changes_since(self.db, chat_id, marks)

    def prune_change_log(self) -> int:
        return change_log_store.prune_log(self.db)

    def rank_snapshot(self, chat_id: int | None, kind: str) -> RankSnapshot | None:
        # With vectors in use, the vector snapshot is read ahead of the keyword one's loading.
        ahead = self.embedder is not None and self.vectors_unavailable() is None
        return self._snapshots.load(scope_of(chat_id), kind, read_ahead=ahead)

    def rank_snapshot_marks(self, chat_id: int | None, kind: str) -> Marks | None:
        return rank_snapshot_store.marks_of(self.db, scope_of(chat_id), kind)

    def background_reads(self) -> bool:
        return self.db.dialect.remote and not self.db.in_transaction()

    def rank_snapshot_later(self, chat_id: int | None, kind: str) -> Future[RankSnapshot | None]:
        return self._snapshots.later(scope_of(chat_id), kind)

    def save_rank_snapshot(self, chat_id: int | None, kind: str, snapshot: RankSnapshot) -> None:
        self._snapshots.drop_read_ahead()
        rank_snapshot_store.save(self.db, scope_of(chat_id), kind, snapshot)

    def drop_rank_snapshots(self, chat_id: int | None, *, every_chat: bool = False) -> int:
        self._snapshots.drop_read_ahead()  # it may hold what is dropped (a forgotten memory)
        return rank_snapshot_store.drop(self.db, None if every_chat else scope_of(chat_id))

    # -- upkeep ------------------------------------------------------------------------

    def stale_ids(self, confidence_floor: float, days: int, limit: int) -> Ids:
        """Active memories below the floor that nobody has seen for `days` days."""
        cutoff = iso_utc(utc_now() - timedelta(days=int(days)))
        rows = self.db.read(
            "SELECT id FROM memories WHERE archived = 0 AND confidence < ?"
            " AND last_seen_at < ? LIMIT ?",
            (confidence_floor, cutoff, limit),
        )
        return [int(row[0]) for row in rows]

    def expired_ids(self, limit: int) -> Ids:
        rows = self.db.read(
            "SELECT id FROM memories WHERE expires_at IS NOT NULL AND expires_at <= ? LIMIT ?",
            (now_iso(), limit),
        )
        return [int(row[0]) for row in rows]

    def has_unembedded(self) -> bool:
        """Whether some active memory has no vector yet (cheap: stops at the first)."""
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
            " AND (embedding_model IS NULL OR embedding_model != ?) ORDER BY id LIMIT ?",
            (model, limit),
        )
        for start in range(0, len(rows), 256):
            batch = rows[start : start + 256]
            vectors = self.embedder.embed([embedding_text(row[2], row[3]) for row in batch])
            self._write_vectors(
                [(int(row[0]), row[1], vector) for row, vector in zip(batch, vectors, strict=True)]
            )
            if progress is not None:
                progress(len(batch))
        return len(rows)

    def count_missing_vectors(self) -> int:
        model = self.embedder.model_name if self.embedder else ""
        row = self.db.read_one(
            "SELECT count(*) FROM memories WHERE archived = 0"
            " AND (embedding_model IS NULL OR embedding_model != ?)",
            (model,),
        )
        assert row is not None
        return int(row[0])

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the keyword index and every vector; how many memories were embedded."""
        self.index.reset(clear_vectors=self._vector_model() is not None)
        self.drop_rank_snapshots(None, every_chat=True)
        total = 0
        while True:
            done = self.embed_missing(limit=1000, progress=progress)
            total += done
            if done == 0:
                return total


def _around_sql(seeds: int, columns: str) -> str:
    """Each of `seeds` ids (bound first, then the chat twice) beside the chat's own
    unarchived memories stored just before and just after it: `seed, columns` rows."""
    inside = "FROM memories WHERE chat_id = ? AND archived = 0 AND id"
    values = ", ".join("(CAST(? AS BIGINT))" for _ in range(seeds))
    return (
        f"SELECT s.column1, {columns} FROM (VALUES {values}) AS s JOIN memories m"
        f" ON m.id IN ((SELECT max(id) {inside} < s.column1),"
        f" (SELECT min(id) {inside} > s.column1))"
    )


def _texts(rows: Sequence[Any]) -> RankingRows:
    return [(int(row[0]), str(row[1]), str(row[2] or "")) for row in rows]


def _insert_values(item: NewMemory) -> tuple[Any, ...]:
    """A new memory's checked column values: chat, content, category, confidence, source,
    expiry, context, sender id, sender name."""
    around = " ".join(str(item.context).split())[:MAX_CONTENT_CHARS]
    return (
        item.chat_id, clean_content(item.content), clean_category(item.category),
        check_confidence(item.confidence), item.source, clean_expiry(item.expires_at),
        around, item.sender_id, item.sender_name,
    )  # fmt: skip
