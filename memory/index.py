"""The derived indexes of `memories`: the FTS5 keyword index and the sqlite-vec vector index.

Both are rebuildable from `memories`. The vector table `memories_vec` is created here (not
in a migration) because it needs sqlite-vec and the embedding dimension; the model and
dimension it holds are recorded in `memory_index_meta`, and a change drops and recreates it.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence

from core.db import Connection
from memory.ranking import token_list

logger = logging.getLogger(__name__)

VEC_TABLE = "memories_vec"
GLOBAL_SCOPE = 0  # the vector table's `chat` value (and `c0` FTS scope) for global memories


def scope_of(chat_id: int | None) -> int:
    return GLOBAL_SCOPE if chat_id is None else chat_id


def fts_text(content: str) -> str:
    """What the full-text index stores: the tokens (CJK bigrams included), space-joined."""
    return " ".join(token_list(content))


def embedding_text(content: str, context: str) -> str:
    """What is embedded for a memory: its context (if any) on the line before the content."""
    return f"{context}\n{content}" if context else content


def index_keywords(
    conn: Connection, memory_id: int, chat_id: int | None, content: str, context: str = ""
) -> None:
    conn.execute("DELETE FROM memories_fts WHERE rowid = ?", (memory_id,))
    conn.execute(
        "INSERT INTO memories_fts (rowid, text, context, scope) VALUES (?, ?, ?, ?)",
        (memory_id, fts_text(content), fts_text(context), f"c{scope_of(chat_id)}"),
    )


def unindex(conn: Connection, memory_id: int) -> None:
    """Remove a memory from both indexes (archived or deleted memories are never candidates)."""
    conn.execute("DELETE FROM memories_fts WHERE rowid = ?", (memory_id,))
    if conn.info.vec_loaded and vector_table_exists(conn):
        conn.execute(f"DELETE FROM {VEC_TABLE} WHERE memory_id = ?", (memory_id,))


def rebuild_keywords(conn: Connection) -> int:
    """Recreate the FTS rows of every active memory; return how many."""
    conn.execute("DELETE FROM memories_fts")
    rows = conn.execute("SELECT id, chat_id, content FROM memories WHERE archived = 0").fetchall()
    for memory_id, chat_id, content in rows:
        index_keywords(conn, memory_id, chat_id, content)
    return len(rows)


def vector_table_exists(conn: Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (VEC_TABLE,)
    ).fetchone()
    return row is not None


def vector_index_model(conn: Connection) -> tuple[str, int] | None:
    """The (model name, dimension) the vector table was built for, if any."""
    rows = dict(conn.execute("SELECT key, value FROM memory_index_meta").fetchall())
    if "embedding_model" not in rows or "embedding_dim" not in rows:
        return None
    return str(rows["embedding_model"]), int(rows["embedding_dim"])


def ensure_vector_table(conn: Connection, model_name: str, dim: int) -> bool:
    """Make `memories_vec` hold vectors of `model_name`/`dim`; True when it was (re)created.

    A different recorded model or dimension drops the table and marks every memory as
    unembedded, so vectors of two models are never mixed. Needs sqlite-vec.
    """
    if not conn.info.vec_loaded:
        return False
    if vector_index_model(conn) == (model_name, dim) and vector_table_exists(conn):
        return False
    previous = vector_index_model(conn)
    if previous is not None:
        logger.warning(
            "embedding model changed from %s (%d dims) to %s (%d dims); rebuilding the "
            "vector index",
            previous[0],
            previous[1],
            model_name,
            dim,
        )
    conn.execute(f"DROP TABLE IF EXISTS {VEC_TABLE}")
    conn.execute(
        f"CREATE VIRTUAL TABLE {VEC_TABLE} USING vec0("
        f" memory_id INTEGER PRIMARY KEY, chat INTEGER,"
        f" embedding FLOAT[{int(dim)}] distance_metric=cosine)"
    )
    conn.execute(
        "INSERT OR REPLACE INTO memory_index_meta (key, value) VALUES"
        " ('embedding_model', ?), ('embedding_dim', ?)",
        (model_name, str(int(dim))),
    )
    conn.execute("UPDATE memories SET embedding_model = NULL")
    return True


def pack_vector(vector: Sequence[float]) -> bytes:
    return struct.pack(f"{len(vector)}f", *vector)


def store_vector(
    conn: Connection, memory_id: int, chat_id: int | None, vector: Sequence[float]
) -> None:
    conn.execute(f"DELETE FROM {VEC_TABLE} WHERE memory_id = ?", (memory_id,))
    conn.execute(
        f"INSERT INTO {VEC_TABLE} (memory_id, chat, embedding) VALUES (?, ?, ?)",
        (memory_id, scope_of(chat_id), pack_vector(vector)),
    )


def nearest(
    conn: Connection, scopes: Sequence[int], vector: Sequence[float], k: int
) -> list[tuple[int, float]]:
    """(memory id, cosine distance) of the `k` nearest vectors within `scopes`, nearest first.

    The chat filter is a vec0 metadata constraint, applied inside the KNN scan.
    """
    marks = ", ".join("?" for _ in scopes)
    rows = conn.execute(
        f"SELECT memory_id, distance FROM {VEC_TABLE}"
        f" WHERE embedding MATCH ? AND k = ? AND chat IN ({marks}) ORDER BY distance",
        (pack_vector(vector), k, *scopes),
    ).fetchall()
    return [(int(row[0]), float(row[1])) for row in rows]


def similarities(
    conn: Connection, vector: Sequence[float], memory_ids: Sequence[int]
) -> dict[int, float]:
    """Cosine similarity of `vector` (unit length) to each listed memory that has a vector."""
    if not memory_ids:
        return {}
    import numpy as np

    ids: list[int] = []
    blobs: list[bytes] = []
    for memory_id in memory_ids:  # vec0 answers primary-key lookups directly
        row = conn.execute(
            f"SELECT embedding FROM {VEC_TABLE} WHERE memory_id = ?", (memory_id,)
        ).fetchone()
        if row is not None:
            ids.append(memory_id)
            blobs.append(row[0])
    if not ids:
        return {}
    matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(ids), -1)
    sims = matrix @ np.asarray(vector, dtype=np.float32)
    return {memory_id: float(sim) for memory_id, sim in zip(ids, sims, strict=True)}
