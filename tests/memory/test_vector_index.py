"""The quantised vector index: binary KNN + exact re-scoring equals exact KNN; layout rebuilds."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from core.storage.database import SqliteDatabase
from core.storage.db import Connection
from core.storage.engine import postgres_storage
from core.storage.session_store import DatabaseSessionStore
from memory import pg_index, sqlite_index
from memory.memory_store import DatabaseMemoryStore
from memory.retrieval import effective_mode, rank_memories
from tests.memory.conftest import Engine, memory_pg_database, without_pgvector
from tests.memory.test_store import HashEmbedder

DIM = 64


def random_index(conn: Connection, count: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """`count` random unit vectors, ids 1..count, every third one in scope 2, others scope 1."""
    sqlite_index.ensure_vector_table(conn, "random", DIM)
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    scopes = [2 if number % 3 == 0 else 1 for number in range(count)]
    for number, (vector, scope) in enumerate(zip(vectors, scopes, strict=True)):
        sqlite_index.store_vector(conn, number + 1, scope, vector.tolist())
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
    assert count * 2 // 3 <= sqlite_index.RESCORE_MIN
    vectors, scopes = random_index(conn, count, seed=count + k)
    rng = np.random.default_rng(1)
    for _ in range(20):
        query = rng.standard_normal(DIM).astype(np.float32)
        query /= np.linalg.norm(query)
        for wanted in ([1], [1, sqlite_index.GLOBAL_SCOPE], [2]):
            got = sqlite_index.nearest(conn, wanted, query.tolist(), k)
            expected = exact(vectors, scopes, set(wanted), query, k)
            assert [mid for mid, _ in got] == [mid for mid, _ in expected]
            assert np.allclose([d for _, d in got], [d for _, d in expected], atol=1e-5)


def test_similarities_are_exact_cosines(conn: Connection) -> None:
    vectors, _ = random_index(conn, 50, seed=3)
    query = vectors[7] + vectors[8]
    sims = sqlite_index.similarities(conn, query.tolist(), [8, 9, 999])
    assert set(sims) == {8, 9}  # 999 has no vector
    cosine = float(vectors[7] @ query / np.linalg.norm(query))
    assert sims[8] == pytest.approx(cosine, abs=1e-5)


def old_layout(conn: Connection, chat_id: int, embedder: HashEmbedder) -> list[int]:
    """A database as layout 1 left it: one float vec0 table, no layout recorded."""
    store = DatabaseMemoryStore(SqliteDatabase(conn))
    ids = [store.add(chat_id, text, "KNOWLEDGE", source="t") for text in ("red apple", "blue sky")]
    conn.execute(f"DROP TABLE IF EXISTS {sqlite_index.VEC_TABLE}")
    conn.execute(f"DROP TABLE IF EXISTS {sqlite_index.FLOAT_TABLE}")
    conn.execute(
        f"CREATE VIRTUAL TABLE {sqlite_index.VEC_TABLE} USING vec0(memory_id INTEGER PRIMARY KEY,"
        f" chat INTEGER, embedding FLOAT[{embedder.dim}] distance_metric=cosine)"
    )
    for memory_id, vector in zip(ids, embedder.embed(["red apple", "blue sky"]), strict=True):
        conn.execute(
            f"INSERT INTO {sqlite_index.VEC_TABLE} VALUES (?, ?, ?)",
            (memory_id, chat_id, sqlite_index.pack_vector(vector)),
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
    chat_id = DatabaseSessionStore(SqliteDatabase(conn)).get_or_create_chat("test", "a").id
    ids = old_layout(conn, chat_id, embedder)
    assert not sqlite_index.vector_index_ready(conn, embedder.model_name, embedder.dim)
    assert (
        effective_mode(DatabaseMemoryStore(SqliteDatabase(conn), embedder), "knn") == "bm25"
    )  # never the old tables
    store = DatabaseMemoryStore(SqliteDatabase(conn), embedder)
    with caplog.at_level(logging.WARNING, logger="memory.sqlite_index"):
        assert store.count_missing_vectors() == 0  # recorded as embedded, but ...
        assert store.embed_missing() == 2  # ... the layout change forces a re-embed
    assert "layout changed from 1 to 2" in caplog.text
    assert sqlite_index.vector_index_ready(conn, embedder.model_name, embedder.dim)
    assert effective_mode(DatabaseMemoryStore(SqliteDatabase(conn), embedder), "knn") == "knn"
    top = rank_memories(
        DatabaseMemoryStore(SqliteDatabase(conn), embedder), chat_id, "blue sky", 1, mode="knn"
    )
    assert top[0].memory.id == ids[1]
    assert (
        DatabaseMemoryStore(SqliteDatabase(conn), embedder).embed_missing() == 0
    )  # rebuilt once, then stable


def test_update_delete_and_reindex_keep_both_tables_in_step(engine: Engine) -> None:
    """The KNN table (vec0 / pgvector) and the float table hold the same memories."""
    embedder = HashEmbedder()
    chat_id = engine.chat("a")
    store = engine.store(embedder)
    ids = [store.add(chat_id, f"fact {word}", "KNOWLEDGE", source="t") for word in "abcd"]
    store.delete(ids[0])
    store.archive(ids[1])
    store.update(ids[3], "fact e")
    assert engine.vector_ids() == {ids[2], ids[3]}  # checks both tables
    assert store.reindex() == 2
    assert engine.vector_ids() == {ids[2], ids[3]}


class RandomEmbedder:
    """Vectors are given to `add`; this only names the model and its dimension."""

    model_name = "random"
    dim = DIM

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("the test gives every vector")

    def embed_query(self, text: str) -> list[float]:
        raise AssertionError("the test gives every vector")


@pytest.mark.parametrize("pgvector", [True, False], ids=["pgvector", "in-process"])
def test_postgresql_nearest_is_exact_knn_within_scopes(
    fresh_postgres_url: str, pgvector: bool
) -> None:
    """PostgreSQL's KNN (pgvector's exact `<=>` order, or numpy without pgvector) returns
    exactly the nearest vectors of the asked scopes."""
    if pgvector:
        storage = postgres_storage(memory_pg_database(fresh_postgres_url))
    else:
        storage = without_pgvector(fresh_postgres_url)
    assert storage.database.pg.info.vector_loaded == pgvector  # the test server ships pgvector
    engine = Engine(storage)
    chats = {1: engine.chat("one"), 2: engine.chat("two")}
    store = engine.store(RandomEmbedder())  # type: ignore[arg-type]
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((120, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    scopes = [2 if number % 3 == 0 else 1 for number in range(120)]
    ids = [
        store.add(chats[scope], f"m{n}", "KNOWLEDGE", source="t", embedding=vector.tolist())
        for n, (vector, scope) in enumerate(zip(vectors, scopes, strict=True))
    ]
    assert engine.vector_ids() == set(ids)
    for _ in range(10):
        query = rng.standard_normal(DIM).astype(np.float32)
        query /= np.linalg.norm(query)
        for wanted in ([1], [2], [1, 2]):
            with storage.database.pg.connection() as conn:
                got = pg_index.nearest(
                    conn, [chats[w] for w in wanted], query.tolist(), 10, pgvector
                )
            expected = exact(vectors, scopes, set(wanted), query, 10)
            assert [mid for mid, _ in got] == [ids[mid - 1] for mid, _ in expected]
            assert np.allclose([d for _, d in got], [d for _, d in expected], atol=1e-5)
    storage.close()
