"""The quantised vector index: binary KNN + exact re-scoring equals exact KNN; layout rebuilds."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from core.db import Connection
from core.sqlite_store import SqliteSessionStore
from memory import index_store
from memory.retrieval import effective_mode, rank_memories
from memory.sqlite_store import SqliteMemoryStore
from tests.memory.test_store import HashEmbedder

DIM = 64


def random_index(conn: Connection, count: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """`count` random unit vectors, ids 1..count, every third one in scope 2, others scope 1."""
    index_store.ensure_vector_table(conn, "random", DIM)
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    scopes = [2 if number % 3 == 0 else 1 for number in range(count)]
    for number, (vector, scope) in enumerate(zip(vectors, scopes, strict=True)):
        index_store.store_vector(conn, number + 1, scope, vector.tolist())
    return vectors, scopes


def exact(
    vectors: np.ndarray, scopes: list[int], wanted: set[int], query: np.ndarray, k: int
) -> list[tuple[int, float]]:
    sims = vectors @ query
    order = [int(i) for i in np.argsort(-sims) if scopes[int(i)] in wanted][:k]
    return [(i + 1, 1.0 - float(sims[i])) for i in order]


@pytest.mark.parametrize(("count", "k"), [(60, 10), (75, 10), (75, 40)])
def test_nearest_equals_exact_knn(conn: Connection, count: int, k: int) -> None:
    """Exact whenever a scope holds at most RESCORE_MIN vectors (75 -> 50 + 25 here).

    Beyond that the binary stage is approximate; on real embeddings it kept LoCoMo's
    cov@10 unchanged (random Gaussian vectors, as here, quantise far worse).
    """
    assert count * 2 // 3 <= index_store.RESCORE_MIN
    vectors, scopes = random_index(conn, count, seed=count + k)
    rng = np.random.default_rng(1)
    for _ in range(20):
        query = rng.standard_normal(DIM).astype(np.float32)
        query /= np.linalg.norm(query)
        for wanted in ([1], [1, index_store.GLOBAL_SCOPE], [2]):
            got = index_store.nearest(conn, wanted, query.tolist(), k)
            expected = exact(vectors, scopes, set(wanted), query, k)
            assert [mid for mid, _ in got] == [mid for mid, _ in expected]
            assert np.allclose([d for _, d in got], [d for _, d in expected], atol=1e-5)


def test_similarities_are_exact_cosines(conn: Connection) -> None:
    vectors, _ = random_index(conn, 50, seed=3)
    query = vectors[7] + vectors[8]
    sims = index_store.similarities(conn, query.tolist(), [8, 9, 999])
    assert set(sims) == {8, 9}  # 999 has no vector
    cosine = float(vectors[7] @ query / np.linalg.norm(query))
    assert sims[8] == pytest.approx(cosine, abs=1e-5)


def old_layout(conn: Connection, chat_id: int, embedder: HashEmbedder) -> list[int]:
    """A database as layout 1 left it: one float vec0 table, no layout recorded."""
    store = SqliteMemoryStore(conn)
    ids = [store.add(chat_id, text, "KNOWLEDGE", source="t") for text in ("red apple", "blue sky")]
    conn.execute(f"DROP TABLE IF EXISTS {index_store.VEC_TABLE}")
    conn.execute(f"DROP TABLE IF EXISTS {index_store.FLOAT_TABLE}")
    conn.execute(
        f"CREATE VIRTUAL TABLE {index_store.VEC_TABLE} USING vec0(memory_id INTEGER PRIMARY KEY,"
        f" chat INTEGER, embedding FLOAT[{embedder.dim}] distance_metric=cosine)"
    )
    for memory_id, vector in zip(ids, embedder.embed(["red apple", "blue sky"]), strict=True):
        conn.execute(
            f"INSERT INTO {index_store.VEC_TABLE} VALUES (?, ?, ?)",
            (memory_id, chat_id, index_store.pack_vector(vector)),
        )
    conn.execute("DELETE FROM memory_index_meta")
    conn.execute(
        "INSERT INTO memory_index_meta (key, value) VALUES ('embedding_model', ?),"
        " ('embedding_dim', ?)",
        (embedder.model_name, str(embedder.dim)),
    )
    conn.execute("UPDATE memories SET embedding_model = ?", (embedder.model_name,))
    return ids


def test_an_old_layout_is_rebuilt_never_queried(
    conn: Connection, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = HashEmbedder()
    chat_id = SqliteSessionStore(conn).get_or_create_chat("test", "a").id
    ids = old_layout(conn, chat_id, embedder)
    assert not index_store.vector_index_ready(conn, embedder.model_name, embedder.dim)
    assert (
        effective_mode(SqliteMemoryStore(conn, embedder), "knn") == "bm25"
    )  # never the old tables
    store = SqliteMemoryStore(conn, embedder)
    with caplog.at_level(logging.WARNING, logger="memory.index"):
        assert store.count_missing_vectors() == 0  # recorded as embedded, but ...
        assert store.embed_missing() == 2  # ... the layout change forces a re-embed
    assert "layout changed from 1 to 2" in caplog.text
    assert index_store.vector_index_ready(conn, embedder.model_name, embedder.dim)
    assert effective_mode(SqliteMemoryStore(conn, embedder), "knn") == "knn"
    top = rank_memories(SqliteMemoryStore(conn, embedder), chat_id, "blue sky", 1, mode="knn")
    assert top[0].memory.id == ids[1]
    assert SqliteMemoryStore(conn, embedder).embed_missing() == 0  # rebuilt once, then stable


def test_update_delete_and_reindex_keep_both_tables_in_step(conn: Connection) -> None:
    embedder = HashEmbedder()
    chat_id = SqliteSessionStore(conn).get_or_create_chat("test", "a").id
    store = SqliteMemoryStore(conn, embedder)
    ids = [store.add(chat_id, f"fact {word}", "KNOWLEDGE", source="t") for word in "abc"]
    store.delete(ids[0])
    store.archive(ids[1])

    def rows(table: str) -> set[int]:
        return {int(row[0]) for row in conn.execute(f"SELECT memory_id FROM {table}")}

    assert rows(index_store.VEC_TABLE) == rows(index_store.FLOAT_TABLE) == {ids[2]}
    assert store.reindex() == 1
    assert rows(index_store.VEC_TABLE) == rows(index_store.FLOAT_TABLE) == {ids[2]}
