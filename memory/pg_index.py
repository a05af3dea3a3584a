"""The derived indexes of `memories` on PostgreSQL, and the change log's SQL.

Full text: PostgreSQL maintains `memories.text_search` itself (a generated tsvector column
with a GIN index, migration m0025), so unlike SQLite's FTS5 table nothing here writes
keyword rows.

Vectors, made at runtime (the dimension is the embedding model's), as on SQLite:
- `memories_vec_float (memory_id, embedding BYTEA)`: every vector as float32 bytes, the same
  table and columns as on SQLite. It is always there: ranking reads a chat's vectors from it
  into the process (`memory.vector_cache`), which needs no extension.
- `memories_vec (memory_id, chat, embedding vector(dim))`: only when the server has
  pgvector, for KNN in the server (`nearest`: the near-duplicate check), filtered by chat.
  Exact (`ORDER BY embedding <=> q` over the chat's rows found by `memories_vec_chat`), not
  HNSW: measured at 10,000 memories, see `nearest` for the figures and the reasons.
Both reference `memories` with ON DELETE CASCADE, so deleting a memory drops its vectors.
The model, dimension and layout are recorded in `memory_index_meta`; a change drops and
recreates the tables and every memory counts as unembedded.

Every function takes a psycopg connection (inside the caller's transaction when one is open).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from typing import Any

from memory.store import (
    scope_of,
)
from memory.terms import content_terms, has_cjk
from migrations.m0006_memory_changes import MEMORY_CHANGES_LOCK
from migrations.m0025_memory_text_search import TEXT_SEARCH_COLUMN

logger = logging.getLogger(__name__)

VEC_TABLE = "memories_vec"  # pgvector: the vectors, for KNN in the server
FLOAT_TABLE = "memories_vec_float"  # float32 bytes, as on SQLite: read into the process
LAYOUT_FLOAT = "pg1"  # float table only (no pgvector on the server)
LAYOUT_VECTOR = "pg1+vector"  # float table and the pgvector table
MAX_QUERY_TERMS = 32

_warned_in_process = False


def layout(vector_loaded: bool) -> str:
    return LAYOUT_VECTOR if vector_loaded else LAYOUT_FLOAT


def scope_sql(chat_id: int | None, column: str = "chat_id") -> tuple[str, tuple[Any, ...]]:
    """The chat's own and the global rows (index-friendly: no IS NOT DISTINCT FROM)."""
    if chat_id is None:
        return f"{column} IS NULL", ()
    return f"({column} = %s OR {column} IS NULL)", (chat_id,)


# -- vectors ------------------------------------------------------------------------------


def pack_vector(vector: Sequence[float]) -> bytes:
    return struct.pack(f"{len(vector)}f", *vector)


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form `[x,y,…]` (no client-side adapter needed)."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _meta(conn: Any) -> dict[str, str]:
    rows = conn.execute("SELECT key, value FROM memory_index_meta").fetchall()
    return {str(key): str(value) for key, value in rows}


def index_state(conn: Any) -> tuple[dict[str, str], int]:
    """The recorded meta and how many of the vector tables exist, in one round trip."""
    rows = conn.execute(
        "SELECT key, value FROM memory_index_meta UNION ALL"
        " SELECT '#tables', count(*)::text FROM pg_class"
        " WHERE relname IN (%s, %s) AND relkind = 'r'"
        " AND relnamespace = current_schema()::regnamespace",
        (VEC_TABLE, FLOAT_TABLE),
    ).fetchall()
    meta = {str(key): str(value) for key, value in rows}
    return meta, int(meta.pop("#tables"))


def vector_index_ready(conn: Any, model_name: str, dim: int, vector_loaded: bool) -> bool:
    meta, tables = index_state(conn)
    return (
        meta.get("embedding_model") == model_name
        and meta.get("embedding_dim") == str(int(dim))
        and meta.get("vector_layout") == layout(vector_loaded)
        and tables == (2 if vector_loaded else 1)
    )


def ensure_vector_tables(conn: Any, model_name: str, dim: int, vector_loaded: bool) -> bool:
    """Make the vector tables hold vectors of `model_name`/`dim`; True when (re)created."""
    if vector_index_ready(conn, model_name, dim, vector_loaded):
        return False
    previous = _meta(conn)
    if previous.get("embedding_model"):
        logger.warning(
            "vector index was %s (%s dims, layout %s); rebuilding it for %s (%d dims, layout %s)",
            previous.get("embedding_model"),
            previous.get("embedding_dim"),
            previous.get("vector_layout"),
            model_name,
            dim,
            layout(vector_loaded),
        )
    conn.execute(f"DROP TABLE IF EXISTS {VEC_TABLE}")
    conn.execute(f"DROP TABLE IF EXISTS {FLOAT_TABLE}")
    conn.execute(
        f"CREATE TABLE {FLOAT_TABLE} (memory_id BIGINT PRIMARY KEY"
        " REFERENCES memories(id) ON DELETE CASCADE, embedding BYTEA NOT NULL)"
    )
    if vector_loaded:
        conn.execute(
            f"CREATE TABLE {VEC_TABLE} (memory_id BIGINT PRIMARY KEY"
            " REFERENCES memories(id) ON DELETE CASCADE, chat BIGINT NOT NULL,"
            f" embedding vector({int(dim)}) NOT NULL)"
        )
        conn.execute(f"CREATE INDEX memories_vec_chat ON {VEC_TABLE} (chat)")
    conn.execute(
        "INSERT INTO memory_index_meta (key, value) VALUES"
        " ('embedding_model', %s), ('embedding_dim', %s), ('vector_layout', %s)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (model_name, str(int(dim)), layout(vector_loaded)),
    )
    conn.execute("UPDATE memories SET embedding_model = NULL WHERE embedding_model IS NOT NULL")
    return True


def store_vectors(
    conn: Any,
    rows: Sequence[tuple[int, int | None, Sequence[float]]],
    model_name: str,
    vector_loaded: bool,
) -> None:
    """Write (memory id, chat id, vector) rows and mark the memories embedded: one
    executemany per table, however many rows."""
    if not rows:
        return
    with conn.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {FLOAT_TABLE} (memory_id, embedding) VALUES (%s, %s)"
            " ON CONFLICT (memory_id) DO UPDATE SET embedding = excluded.embedding",
            [(memory_id, pack_vector(vector)) for memory_id, _, vector in rows],
        )
        if vector_loaded:
            cursor.executemany(
                f"INSERT INTO {VEC_TABLE} (memory_id, chat, embedding) VALUES (%s, %s, %s::vector)"
                " ON CONFLICT (memory_id) DO UPDATE SET embedding = excluded.embedding",
                [
                    (memory_id, scope_of(chat_id), vector_literal(vector))
                    for memory_id, chat_id, vector in rows
                ],
            )
        cursor.execute(
            "UPDATE memories SET embedding_model = %s WHERE id = ANY(%s)",
            (model_name, [row[0] for row in rows]),
        )


def copy_new_vectors(
    conn: Any, rows: Sequence[tuple[int, int | None, Sequence[float]]], vector_loaded: bool
) -> None:
    """Write the vectors of memories inserted in this transaction (`embedding_model` already
    set, no vector to replace): one `COPY` per table, the server's fastest way in (an
    import of 10,000 memories spent most of its server time in per-row upserts)."""
    if not rows:
        return
    with conn.cursor() as cursor:
        with cursor.copy(f"COPY {FLOAT_TABLE} (memory_id, embedding) FROM STDIN") as copy:
            for memory_id, _, vector in rows:
                copy.write_row((memory_id, pack_vector(vector)))
        if vector_loaded:
            with cursor.copy(f"COPY {VEC_TABLE} (memory_id, chat, embedding) FROM STDIN") as copy:
                for memory_id, chat_id, vector in rows:
                    copy.write_row((memory_id, scope_of(chat_id), vector_literal(vector)))


def drop_vector(conn: Any, memory_id: int, *, with_knn_table: bool) -> None:
    conn.execute(f"DELETE FROM {FLOAT_TABLE} WHERE memory_id = %s", (memory_id,))
    if with_knn_table:
        conn.execute(f"DELETE FROM {VEC_TABLE} WHERE memory_id = %s", (memory_id,))


def clear_vectors(conn: Any, vector_loaded: bool) -> None:
    conn.execute(
        f"TRUNCATE {VEC_TABLE}, {FLOAT_TABLE}" if vector_loaded else f"TRUNCATE {FLOAT_TABLE}"
    )
    conn.execute("UPDATE memories SET embedding_model = NULL WHERE embedding_model IS NOT NULL")


def nearest(
    conn: Any,
    scopes: Sequence[int],
    vector: Sequence[float],
    k: int,
    vector_loaded: bool,
) -> list[tuple[int, float]]:
    """(memory id, cosine distance) of the `k` nearest vectors within `scopes`, nearest first.

    With pgvector: an exact KNN over the scopes' rows (`memories_vec_chat` finds them, the
    server sorts by `<=>`); without it the scopes' float vectors are scored here (logged
    once). Measured with `mnemo bench memory --n 10000 --test-postgres` (9,000 vectors in the
    chat, 384 dims, a loaded 2-core machine): exact p50 7.8 ms / p95 14.7 ms; an HNSW index
    with `hnsw.iterative_scan = relaxed_order` p50 1.7 / p95 6.3 ms at recall@10 1.0. Exact
    is kept: this KNN serves only the near-duplicate check of new memories (per-turn ranking
    scores the chat's vectors in process, `memory.vector_cache`), so its reads are rare,
    while an HNSW index costs every write a graph insert and, filtered by chat, returns
    fewer than k rows unless each session turns iterative scans on.
    """
    wanted = list(dict.fromkeys(scopes))
    if vector_loaded:
        rows = conn.execute(
            f"SELECT memory_id, embedding <=> %s::vector AS distance FROM {VEC_TABLE}"
            " WHERE chat = ANY(%s) ORDER BY distance LIMIT %s",
            (vector_literal(vector), wanted, k),
        ).fetchall()
        return [(int(row[0]), float(row[1])) for row in rows]
    _warn_in_process()
    import numpy as np

    from memory.row_products import row_products

    rows = conn.execute(
        f"SELECT v.memory_id, v.embedding FROM {FLOAT_TABLE} v JOIN memories m"
        " ON m.id = v.memory_id WHERE coalesce(m.chat_id, 0) = ANY(%s)",
        (wanted,),
    ).fetchall()
    if not rows:
        return []
    ids = [int(row[0]) for row in rows]
    matrix = np.frombuffer(b"".join(bytes(row[1]) for row in rows), dtype=np.float32)
    matrix = matrix.reshape(len(ids), -1)
    query = np.asarray(vector, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(query))
    sims = row_products(matrix, query) / np.where(norms > 0, norms, 1.0)
    order = np.argsort(-sims, kind="stable")[:k]
    return [(ids[i], 1.0 - float(sims[i])) for i in order]


def _warn_in_process() -> None:
    global _warned_in_process
    if not _warned_in_process:
        _warned_in_process = True
        logger.warning(
            "pgvector is not installed on the PostgreSQL server: vector KNN runs in this process"
        )


def vector_rows(
    conn: Any,
    chat_id: int | None,
    model_name: str,
    now: str,
    memory_ids: Sequence[int] | None = None,
) -> list[tuple[int, bytes]]:
    """(id, float32 bytes) of the chat's and global active memories embedded with
    `model_name` (or those of them among `memory_ids`), by id."""
    scope, params = scope_sql(chat_id, "m.chat_id")
    sql = (
        f"SELECT m.id, v.embedding FROM memories m JOIN {FLOAT_TABLE} v ON v.memory_id = m.id"
        f" WHERE {scope} AND m.archived = 0 AND m.embedding_model = %s"
        " AND (m.expires_at IS NULL OR m.expires_at > %s)"
    )
    values: tuple[Any, ...] = (*params, model_name, now)
    if memory_ids is not None:
        sql += " AND m.id = ANY(%s)"
        values += (list(memory_ids),)
    rows = conn.execute(sql + " ORDER BY m.id", values).fetchall()
    return [(int(row[0]), bytes(row[1])) for row in rows]


# -- full text ----------------------------------------------------------------------------


def text_query(text: str) -> tuple[str, list[str]]:
    """A `to_tsquery` expression of the text's content terms OR-ed (each quoted, so no
    syntax leaks), and ILIKE patterns for its CJK bigrams: PostgreSQL's parser keeps a run
    of CJK characters as one word, where `memory.terms` splits it into bigrams."""
    terms = content_terms(text)[:MAX_QUERY_TERMS]
    words = [term for term in terms if not has_cjk(term)]
    cjk = [term for term in terms if has_cjk(term)]
    query = " | ".join("'" + term.replace("'", "''").replace("\\", "") + "'" for term in words)
    patterns = ["%" + term.replace("%", "").replace("_", "") + "%" for term in cjk]
    return query, patterns


def _matching_sql(chat_id: int, text: str, limit: int) -> tuple[str, tuple[Any, ...]] | None:
    """The lookup's statement and parameters (None: the text has no word to look up). It
    matches and ranks by the stored `text_search` vector (m0025), computing none."""
    query, patterns = text_query(text)
    if not query and not patterns:
        return None
    conditions = []
    params: list[Any] = []
    if query:
        conditions.append(f"{TEXT_SEARCH_COLUMN} @@ to_tsquery('english', %s)")
        params.append(query)
    if patterns:
        conditions.append("(content || ' ' || context) ILIKE ANY(%s)")
        params.append(patterns)
    rank = f"ts_rank({TEXT_SEARCH_COLUMN}, to_tsquery('english', %s)) DESC, " if query else ""
    sql = (
        f"SELECT id FROM memories WHERE chat_id = %s AND archived = 0"
        f" AND ({' OR '.join(conditions)}) ORDER BY {rank}id DESC LIMIT %s"
    )
    return sql, (chat_id, *params, *([query] if query else []), limit)


def matching_ids(conn: Any, chat_id: int, text: str, limit: int) -> list[int]:
    """The chat's own active memories sharing words with `text`, best first (`ts_rank`;
    CJK matches after the ranked ones). A failing lookup is logged and answers nothing,
    inside a savepoint so that the caller's transaction goes on."""
    statement = _matching_sql(chat_id, text, limit)
    if statement is None:
        return []
    import psycopg

    try:
        with conn.transaction():
            rows = conn.execute(*statement).fetchall()
    except psycopg.DatabaseError as exc:
        if isinstance(exc, psycopg.OperationalError):
            raise
        logger.warning("keyword lookup of known memories failed: %s", exc)
        return []
    return [int(row[0]) for row in rows]


def matching_plan(conn: Any, chat_id: int, text: str) -> list[str]:
    """How PostgreSQL runs the known-memory lookup of `text` (`EXPLAIN VERBOSE`: a test
    checks it computes no `to_tsvector`)."""
    statement = _matching_sql(chat_id, text, 10)
    if statement is None:
        return []
    rows = conn.execute(f"EXPLAIN (VERBOSE, COSTS OFF) {statement[0]}", statement[1]).fetchall()
    return [str(row[0]) for row in rows]


def lock_log(conn: Any) -> None:
    """Queue behind other memory writers until commit (see migration m0006); the change log
    itself is `memory.change_log_store`'s."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (MEMORY_CHANGES_LOCK,))


HNSW_INDEX = "memories_vec_hnsw"


def set_hnsw_index(conn: Any, present: bool) -> None:
    """Create or drop an HNSW index on the pgvector table (`mnemo bench memory` compares
    KNN with and without it; the store itself does not create one, see `nearest`)."""
    if present:
        conn.execute(
            f"CREATE INDEX IF NOT EXISTS {HNSW_INDEX} ON {VEC_TABLE}"
            " USING hnsw (embedding vector_cosine_ops)"
        )
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
    else:
        conn.execute(f"DROP INDEX IF EXISTS {HNSW_INDEX}")
        conn.execute("RESET hnsw.iterative_scan")
