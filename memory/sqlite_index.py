"""The derived indexes of `memories`: the FTS5 full-text index and the sqlite-vec vector index.

Both are rebuildable from `memories`. FTS5 serves full-text lookups (the reflector's search
for known memories); ranking scores keywords from its own posting lists (`memory.posting_lists`).
The vector index is created here (not in a migration) because it needs sqlite-vec and the
embedding dimension: `memories_vec` (vec0) holds each vector's binary code (one bit per
dimension, Hamming KNN, partitioned by chat scope) and `memories_vec_float` the float32
vector; a query takes the nearest binary codes and re-scores them exactly with the floats
(measured ~5x faster than a float vec0 KNN on 9,000 vectors, same results). The model,
dimension and layout are recorded in `memory_index_meta`; a change of any drops and
recreates the index, and the memories are embedded again.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Sequence
from typing import Any

from core.storage.db import Connection, OperationalError, transaction
from memory.store import (
    GLOBAL_SCOPE,
    scope_of,
)
from memory.terms import fts_query, token_list

logger = logging.getLogger(__name__)
_warned_no_secure_fts = False

VEC_TABLE = "memories_vec"  # vec0: binary codes of the vectors, partitioned by chat scope
FLOAT_TABLE = "memories_vec_float"  # the float32 vectors, for exact re-scoring
LAYOUT = "2"  # 1: float vec0 KNN; 2: binary vec0 KNN + exact float re-scoring
RESCORE_MIN = 50  # binary candidates re-scored exactly, at least ...
RESCORE_FACTOR = 1  # ... and as many as wanted results (vec0 KNN cost grows with k)
NOW_SQL = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
ACTIVE_SQL = f"archived = 0 AND (expires_at IS NULL OR expires_at > {NOW_SQL})"


def scopes(chat_id: int | None) -> list[int]:
    """The index scopes a chat's queries search: its own and the global one."""
    return [GLOBAL_SCOPE] if chat_id is None else [chat_id, GLOBAL_SCOPE]


def fts_text(content: str) -> str:
    """What the full-text index stores: the tokens (CJK bigrams included), space-joined."""
    return " ".join(token_list(content))


def embedding_text(content: str, context: str) -> str:
    """What is embedded for a memory: its context (if any) on the line before the content."""
    return f"{context}\n{content}" if context else content


def secure_fts_deletes(conn: Connection) -> bool:
    """Make FTS5 take a deleted row's words out of the index's segments at once (its
    'secure-delete' option, SQLite 3.44+, kept in the database) instead of leaving them
    there until a merge. False, with one warning, on an older SQLite."""
    global _warned_no_secure_fts
    row = conn.execute("SELECT v FROM memories_fts_config WHERE k = 'secure-delete'").fetchone()
    if row is not None and str(row[0]) == "1":
        return True
    try:
        conn.execute("INSERT INTO memories_fts (memories_fts, rank) VALUES ('secure-delete', 1)")
    except OperationalError as exc:
        if not _warned_no_secure_fts:
            logger.warning(
                "SQLite %s has no FTS5 secure-delete (%s): forgetting a memory merges the"
                " whole full-text index instead",
                conn.info.sqlite_version,
                exc,
            )
            _warned_no_secure_fts = True
        return False
    return True


def _purge_fts(conn: Connection) -> None:
    """Where FTS5 cannot secure-delete: merge every segment, dropping deleted words."""
    conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')")


def index_keywords(
    conn: Connection, memory_id: int, chat_id: int | None, content: str, context: str = ""
) -> None:
    secure_fts_deletes(conn)
    conn.execute("DELETE FROM memories_fts WHERE rowid = ?", (memory_id,))
    conn.execute(
        "INSERT INTO memories_fts (rowid, text, context, scope) VALUES (?, ?, ?, ?)",
        (memory_id, fts_text(content), fts_text(context), f"c{scope_of(chat_id)}"),
    )


def unindex(conn: Connection, memory_id: int) -> None:
    """Remove a memory from both indexes (archived or deleted memories are never candidates)."""
    secure = secure_fts_deletes(conn)
    conn.execute("DELETE FROM memories_fts WHERE rowid = ?", (memory_id,))
    if not secure:
        _purge_fts(conn)
    if conn.info.vec_loaded and vector_table_exists(conn):
        drop_vector(conn, memory_id)


def unindex_all(conn: Connection, memory_ids: Sequence[int]) -> None:
    """Remove memories (about to be deleted) from both indexes and from supersede links."""
    secure = not memory_ids or secure_fts_deletes(conn)
    _unindex_batches(conn, memory_ids)
    if not secure:
        _purge_fts(conn)


def _unindex_batches(conn: Connection, memory_ids: Sequence[int]) -> None:
    """`unindex_all`'s deletes, 500 ids a statement."""
    for start in range(0, len(memory_ids), 500):
        batch = tuple(memory_ids[start : start + 500])
        marks = ", ".join("?" * len(batch))
        conn.execute(f"DELETE FROM memories_fts WHERE rowid IN ({marks})", batch)
        conn.execute(
            f"DELETE FROM memory_supersede_edges WHERE old_id IN ({marks}) OR new_id IN ({marks})",
            batch + batch,
        )
        if not vector_table_exists(conn):
            continue
        conn.execute(f"DELETE FROM {FLOAT_TABLE} WHERE memory_id IN ({marks})", batch)
        if conn.info.vec_loaded:
            conn.execute(f"DELETE FROM {VEC_TABLE} WHERE memory_id IN ({marks})", batch)
        else:
            logger.warning(
                "sqlite-vec is not loaded: the binary codes of %d deleted memories stay in %s"
                " until `mnemo memory reindex`",
                len(batch),
                VEC_TABLE,
            )


def rebuild_keywords(conn: Connection) -> int:
    """Recreate the FTS rows of every active memory; return how many."""
    conn.execute("DELETE FROM memories_fts")
    rows = conn.execute(
        "SELECT id, chat_id, content, context FROM memories WHERE archived = 0"
    ).fetchall()
    for memory_id, chat_id, content, context in rows:
        index_keywords(conn, memory_id, chat_id, content, context or "")
    return len(rows)


def vector_table_exists(conn: Connection) -> bool:
    """Whether both tables of the vector index exist."""
    rows = conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
        (VEC_TABLE, FLOAT_TABLE),
    ).fetchone()
    return int(rows[0]) == 2


def _meta(conn: Connection) -> dict[str, str]:
    return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM memory_index_meta")}


def vector_index_model(conn: Connection) -> tuple[str, int] | None:
    """The (model name, dimension) the vector table was built for, if any."""
    rows = _meta(conn)
    if "embedding_model" not in rows or "embedding_dim" not in rows:
        return None
    return rows["embedding_model"], int(rows["embedding_dim"])


def vector_index_ready(conn: Connection, model_name: str, dim: int) -> bool:
    """Whether the vector index exists in the current layout for this model and dimension."""
    rows = _meta(conn)
    return (
        rows.get("embedding_model") == model_name
        and rows.get("embedding_dim") == str(int(dim))
        and rows.get("vector_layout") == LAYOUT
        and vector_table_exists(conn)
    )


def ensure_vector_table(conn: Connection, model_name: str, dim: int) -> bool:
    """Make the vector index hold vectors of `model_name`/`dim`; True when it was (re)created.

    A different recorded model, dimension or index layout drops the tables and marks every
    memory as unembedded, so vectors of two models or layouts are never mixed. Needs
    sqlite-vec.
    """
    if not conn.info.vec_loaded:
        return False
    if vector_index_ready(conn, model_name, dim):
        return False
    _warn_rebuild(vector_index_model(conn), _meta(conn).get("vector_layout", "1"), model_name, dim)
    with transaction(conn):
        conn.execute(f"DROP TABLE IF EXISTS {VEC_TABLE}")
        conn.execute(f"DROP TABLE IF EXISTS {FLOAT_TABLE}")
        conn.execute(
            f"CREATE VIRTUAL TABLE {VEC_TABLE} USING vec0("
            f" memory_id INTEGER PRIMARY KEY, chat INTEGER partition key, bits BIT[{int(dim)}])"
        )
        conn.execute(
            f"CREATE TABLE {FLOAT_TABLE} (memory_id INTEGER PRIMARY KEY, embedding BLOB NOT NULL)"
        )
        conn.execute(
            "INSERT OR REPLACE INTO memory_index_meta (key, value) VALUES"
            " ('embedding_model', ?), ('embedding_dim', ?), ('vector_layout', ?)",
            (model_name, str(int(dim)), LAYOUT),
        )
        conn.execute("UPDATE memories SET embedding_model = NULL")
    return True


def _warn_rebuild(previous: tuple[str, int] | None, layout: str, model_name: str, dim: int) -> None:
    if previous is None:
        return
    if previous != (model_name, dim):
        logger.warning(
            "embedding model changed from %s (%d dims) to %s (%d dims); rebuilding the "
            "vector index",
            previous[0],
            previous[1],
            model_name,
            dim,
        )
    else:
        logger.warning(
            "vector index layout changed from %s to %s; rebuilding the vector index",
            layout,
            LAYOUT,
        )


def pack_vector(vector: Sequence[float]) -> bytes:
    return struct.pack(f"{len(vector)}f", *vector)


def store_vector(
    conn: Connection, memory_id: int, chat_id: int | None, vector: Sequence[float]
) -> None:
    blob = pack_vector(vector)
    drop_vector(conn, memory_id)
    conn.execute(
        f"INSERT INTO {VEC_TABLE} (memory_id, chat, bits) VALUES (?, ?, vec_quantize_binary(?))",
        (memory_id, scope_of(chat_id), blob),
    )
    conn.execute(
        f"INSERT INTO {FLOAT_TABLE} (memory_id, embedding) VALUES (?, ?)", (memory_id, blob)
    )


def drop_vector(conn: Connection, memory_id: int) -> None:
    conn.execute(f"DELETE FROM {VEC_TABLE} WHERE memory_id = ?", (memory_id,))
    conn.execute(f"DELETE FROM {FLOAT_TABLE} WHERE memory_id = ?", (memory_id,))


def clear_vectors(conn: Connection) -> None:
    """Drop every vector; every memory counts as not embedded."""
    conn.execute(f"DELETE FROM {VEC_TABLE}")
    conn.execute(f"DELETE FROM {FLOAT_TABLE}")
    conn.execute("UPDATE memories SET embedding_model = NULL")


def set_embedding_model(conn: Connection, memory_id: int, model_name: str) -> None:
    conn.execute("UPDATE memories SET embedding_model = ? WHERE id = ?", (model_name, memory_id))


def candidates(
    conn: Connection, scopes: Sequence[int], vector: Sequence[float], count: int
) -> list[int]:
    """Ids of the `count` nearest binary codes (Hamming distance) within `scopes`.

    `chat` is the vec0 partition key, so each scope is its own KNN over its partition.
    """
    blob = pack_vector(vector)
    found: list[tuple[float, int]] = []
    for scope in dict.fromkeys(scopes):
        found.extend(
            (float(row[1]), int(row[0]))
            for row in conn.execute(
                f"SELECT memory_id, distance FROM {VEC_TABLE}"
                " WHERE bits MATCH vec_quantize_binary(?) AND k = ? AND chat = ?",
                (blob, count, scope),
            )
        )
    if len(scopes) > 1:
        found.sort()
    return [memory_id for _, memory_id in found[:count]]


def rescore_count(k: int) -> int:
    """How many binary candidates are re-scored exactly for `k` results."""
    return max(RESCORE_MIN, RESCORE_FACTOR * k)


def nearest(
    conn: Connection, scopes: Sequence[int], vector: Sequence[float], k: int
) -> list[tuple[int, float]]:
    """(memory id, cosine distance) of the `k` nearest vectors within `scopes`, nearest first.

    Binary codes pick max(RESCORE_MIN, RESCORE_FACTOR * k) candidates, then their float
    vectors are scored exactly (on LoCoMo the same top results as an exact float KNN).
    """
    count = rescore_count(k)
    scored = similarities(conn, vector, candidates(conn, scopes, vector, count))
    best = sorted(scored.items(), key=lambda item: -item[1])[:k]
    return [(memory_id, 1.0 - sim) for memory_id, sim in best]


def similarities(
    conn: Connection, vector: Sequence[float], memory_ids: Sequence[int]
) -> dict[int, float]:
    """Cosine similarity of `vector` to each listed memory that has a vector."""
    if not memory_ids:
        return {}
    import numpy as np

    from memory.row_products import row_products

    ids: list[int] = []
    blobs: list[bytes] = []
    for start in range(0, len(memory_ids), 900):
        chunk = tuple(memory_ids[start : start + 900])
        marks = ", ".join("?" * len(chunk))
        for memory_id, blob in conn.execute(
            f"SELECT memory_id, embedding FROM {FLOAT_TABLE} WHERE memory_id IN ({marks})", chunk
        ):
            ids.append(int(memory_id))
            blobs.append(blob)
    if not ids:
        return {}
    matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(ids), -1)
    query = np.asarray(vector, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(query))
    sims = row_products(matrix, query) / np.where(norms > 0, norms, 1.0)
    return dict(zip(ids, sims.tolist(), strict=True))


# CROSS JOIN keeps the full-text index the outer loop: with a plain JOIN SQLite walked the
# chat's memories and ran one MATCH per row (3 s at 9,000 memories; `mnemo bench memory`).
MATCHING_SQL = (
    "SELECT m.id FROM memories_fts f CROSS JOIN memories m ON m.id = f.rowid"
    " WHERE memories_fts MATCH ? AND m.chat_id = ? AND m.archived = 0"
    " ORDER BY bm25(memories_fts) LIMIT ?"
)


def matching_plan(conn: Connection) -> list[str]:
    """How SQLite runs the known-memory lookup (a test checks the index comes first)."""
    rows = conn.execute(f"EXPLAIN QUERY PLAN {MATCHING_SQL}", ('"x"', 1, 1)).fetchall()
    return [str(row[3]) for row in rows]


def fts_matching_ids(conn: Connection, chat_id: int, text: str, limit: int) -> list[int]:
    """The chat's own active memories sharing words with `text`, by FTS5's BM25, best first.

    The index is derived: a failing lookup is logged and answers nothing.
    """
    query = fts_query(text)
    if not query:
        return []
    try:
        rows = conn.execute(MATCHING_SQL, (f'scope:"c{chat_id}" AND ({query})', chat_id, limit))
        rows = rows.fetchall()
    except OperationalError as exc:
        logger.warning("keyword lookup of known memories failed: %s", exc)
        return []
    return [int(row[0]) for row in rows]


def fts_bm25_ids(
    conn: Connection, chat_id: int, text: str, limit: int, context_weight: float
) -> list[tuple[int, float]]:
    """BM25 asked of the FTS5 table itself (the benchmark compares the posting lists to it)."""
    match = f"scope:(c{chat_id} OR c0) AND {{text context}}:({fts_query(text)})"
    rows = conn.execute(
        f"SELECT rowid, bm25(memories_fts, 1.0, {context_weight}, 0.0) AS rank FROM memories_fts"
        " WHERE memories_fts MATCH ? ORDER BY rank LIMIT ?",
        (match, limit),
    ).fetchall()
    return [(int(row[0]), float(row[1])) for row in rows]


# -- what the keyword lists read: the rows, and the change log of migration m0006 ----------


def ranking_rows(
    conn: Connection, chat_id: int | None, memory_ids: Sequence[int] | None = None
) -> list[tuple[int, str, str]]:
    """The active memories a chat's queries rank (its own and global ones), or those of them
    among `memory_ids`."""
    sql = (
        "SELECT id, content, context FROM memories WHERE (chat_id IS ? OR chat_id IS NULL)"
        f" AND {ACTIVE_SQL}"
    )
    if memory_ids is None:
        return _texts(conn.execute(sql + " ORDER BY id", (chat_id,)))
    found: list[tuple[int, str, str]] = []
    for start in range(0, len(memory_ids), 900):
        batch = tuple(memory_ids[start : start + 900])
        marks = ", ".join("?" * len(batch))
        found += _texts(conn.execute(f"{sql} AND id IN ({marks}) ORDER BY id", (chat_id, *batch)))
    return found


def vector_rows(
    conn: Connection, chat_id: int | None, memory_ids: Sequence[int] | None = None
) -> list[tuple[int, bytes]]:
    """(id, float32 vector) of the chat's and global active memories that have a vector (or
    those of them among `memory_ids`)."""
    sql = (
        f"SELECT m.id, v.embedding FROM memories m JOIN {FLOAT_TABLE} v ON v.memory_id = m.id"
        " WHERE (m.chat_id IS ? OR m.chat_id IS NULL) AND m.archived = 0"
        f" AND (m.expires_at IS NULL OR m.expires_at > {NOW_SQL})"
    )
    if not vector_table_exists(conn):
        return []
    if memory_ids is None:
        return [(int(r[0]), bytes(r[1])) for r in conn.execute(sql + " ORDER BY m.id", (chat_id,))]
    found: list[tuple[int, bytes]] = []
    for start in range(0, len(memory_ids), 900):
        batch = tuple(memory_ids[start : start + 900])
        marks = ", ".join("?" * len(batch))
        rows = conn.execute(f"{sql} AND m.id IN ({marks}) ORDER BY m.id", (chat_id, *batch))
        found += [(int(r[0]), bytes(r[1])) for r in rows]
    return found


def _texts(rows: Iterable[Any]) -> list[tuple[int, str, str]]:
    return [(int(row[0]), str(row[1]), str(row[2] or "")) for row in rows]
