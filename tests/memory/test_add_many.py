"""MemoryStore.add_many on both engines: a batch stored as `add` stores one, all or nothing."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest

from core.errors import InputError
from memory.retrieval import rank_memories
from memory.store import NewMemory
from tests.memory.conftest import Engine
from tests.memory.test_store import HashEmbedder


class CountingEmbedder(HashEmbedder):
    """The hashed bag of words, counting the calls that embed documents."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return super().embed(texts)


def test_a_batch_is_stored_as_add_stores_each(engine: Engine) -> None:
    embedder = CountingEmbedder()
    store = engine.store(embedder)
    a = engine.chat("a")
    given = embedder.embed(["a vector of its own"])[0]
    items = [
        NewMemory(a, "  Ana  bought a kayak in Oslo ", "event", "bench"),
        NewMemory(None, "Ben is learning the violin", "KNOWLEDGE", "bench", confidence=0.9),
        NewMemory(a, "Chen fixed a drone", "EVENT", "bench", embedding=given),
        NewMemory(a, "Dara sold a camera", "EVENT", "bench", context="at the market",
                  sender_id="7", sender_name="Dara", expires_at="2999-01-01"),
    ]  # fmt: skip
    embedder.calls = 0
    ids = store.add_many(items)
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert embedder.calls == 1  # the three without a vector, in one call
    stored = [store.get(memory_id) for memory_id in ids]
    assert [m.content for m in stored if m] == [
        "Ana bought a kayak in Oslo",
        "Ben is learning the violin",
        "Chen fixed a drone",
        "Dara sold a camera",
    ]
    first, second, third, fourth = stored
    assert first and first.category == "EVENT" and first.chat_id == a and first.confidence == 0.7
    assert second and second.chat_id is None and second.confidence == 0.9
    assert fourth and (fourth.context, fourth.sender_id, fourth.sender_name) == (
        "at the market",
        "7",
        "Dara",
    )
    assert fourth.expires_at == "2999-01-01T00:00:00.000Z"
    assert {m.embedding_model for m in stored if m} == {"hash-bow"}
    assert engine.vector_ids() == set(ids)  # both vector tables, on PostgreSQL
    assert engine.rows("SELECT count(*) FROM memory_changes")[0][0] == 4
    floats = engine.rows("SELECT embedding FROM memories_vec_float WHERE memory_id = ?", (ids[2],))
    assert list(struct.unpack("16f", bytes(floats[0][0]))) == pytest.approx(given)
    assert [m.id for m in store.matching(a, "kayak", 5)] == [ids[0]]
    near = store.find_near_duplicate(a, "Chen fixed a drone", method="cosine", embedding=given)
    assert near is not None and near.id == ids[2]  # the KNN index (sqlite-vec / pgvector)
    top = rank_memories(store, a, "Ana bought a kayak in Oslo", 1, mode="knn")
    assert [r.memory.id for r in top] == [ids[0]]


@pytest.mark.parametrize(
    "bad",
    [
        NewMemory(1, "   ", "EVENT", "bench"),
        NewMemory(1, "fine", "OPINION", "bench"),
        NewMemory(1, "fine", "EVENT", "bench", confidence=2.0),
        NewMemory(1, "fine", "EVENT", "bench", embedding=[1.0, 0.0]),
    ],
    ids=["empty", "category", "confidence", "dimension"],
)
def test_one_bad_item_stores_nothing(engine: Engine, bad: NewMemory) -> None:
    store = engine.store(HashEmbedder())
    a = engine.chat("a")
    good = [NewMemory(a, f"fact {n}", "EVENT", "bench") for n in range(3)]
    with pytest.raises(InputError):
        store.add_many([*good, replace(bad, chat_id=a)])
    assert engine.rows("SELECT count(*) FROM memories")[0][0] == 0
    assert engine.vector_ids() == set()


def test_an_empty_batch_and_a_store_without_vectors(engine: Engine) -> None:
    store = engine.store()
    a = engine.chat("a")
    assert store.add_many([]) == []
    ids = store.add_many([NewMemory(a, "plain fact", "EVENT", "bench")])
    memory = store.get(ids[0])
    assert memory is not None and memory.embedding_model is None
    assert engine.vector_ids() == set()
    assert [r.memory.id for r in rank_memories(store, a, "plain fact", 3, mode="bm25")] == ids


def test_the_memory_bench_fills_through_add_many(engine: Engine) -> None:
    """`mnemo bench memory` stores its synthetic memories as an import would, in batches."""
    import random

    from memory.bench import cli as bench

    embedder = CountingEmbedder()
    store = engine.store(embedder)
    a, b = engine.chat("a"), engine.chat("b")
    embedder.calls = 0
    bench._fill(store, embedder, (a, b), 25, random.Random(7))
    assert embedder.calls == 1  # the bench embeds each batch once; the store embeds nothing
    assert (len(store.list(a, include_global=False)), len(store.list(b))) == (23, 2)
    assert len(engine.vector_ids()) == 25
