"""A chat's first query after a start on PostgreSQL answers from the saved sign codes and the
rows it needs (`memory.pending_vectors`) before the float16 block has arrived, with the same
results as the loaded block; SQLite loads the whole snapshot as before."""

from __future__ import annotations

import itertools

import numpy as np

from memory.pending_vectors import PendingBase
from memory.rank_snapshots import checkpoint
from memory.retrieval import rank_memories
from memory.snapshot_arrays import unpack_arrays
from memory.store import MemoryStore, NewMemory
from memory.stores import memory_store
from memory.vector_cache import (
    RESCORE_MIN,
    VECTOR_CODES,
    VECTORS,
    ChatVectors,
    chat_vectors,
    vectors_loaded,
)
from tests.memory.conftest import Engine
from tests.memory.test_store import HashEmbedder

PEOPLE = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goro", "Hana", "Ivan", "Jo"]
DOINGS = ["cooked", "painted", "sold", "bought", "fixed", "visited", "found", "lost"]
THINGS = ["a kayak", "the fence", "a violin", "pasta", "a camera", "the garden", "a map"]
QUERIES = ["Ana painted a violin", "who sold the camera", "Goro kayak", "lost map", "pasta"]


def _many(engine: Engine) -> tuple[MemoryStore, int]:
    """More memories than the exact scan takes: the search picks them by their codes."""
    store = engine.store(HashEmbedder(dim=64))
    chat = engine.chat("a")
    texts = [" ".join(words) for words in itertools.product(PEOPLE, DOINGS, THINGS)]
    assert len(texts) > 2 * RESCORE_MIN
    store.add_many([NewMemory(chat, text, "EVENT", "t") for text in texts])
    return store, chat


def _reopened(engine: Engine) -> tuple[object, MemoryStore]:
    storage = engine.another_connection()
    return storage, memory_store(storage, HashEmbedder(dim=64))


def _search(vectors: ChatVectors, query: str, also: list[int]) -> object:
    return vectors.search(HashEmbedder(dim=64).embed_query(query), 10, also)


def test_the_first_query_answers_from_the_codes_before_the_block(engine: Engine) -> None:
    store, chat = _many(engine)
    checkpoint(store, chat, 0)
    built = ChatVectors.build(store.vector_rows(chat))  # what a warm process holds
    also = [int(i) for i in built.base_ids[::97]]  # keyword hits: scored whatever they are
    storage, again = _reopened(engine)
    try:
        vectors = chat_vectors(again, chat)
        if engine.name == "sqlite":  # one connection: the whole snapshot, as before
            assert isinstance(vectors.base, np.ndarray)
        else:
            assert isinstance(vectors.base, PendingBase) and not vectors.base.loaded
        for query in QUERIES:  # the same ids, the same scores (the same float16 bits)
            assert _search(vectors, query, also) == _search(built, query, also)
        checkpoint(again, chat, 0)  # saved from what this process holds: waits for the block
        saved = unpack_arrays(again.rank_snapshot(chat, VECTORS).data)  # type: ignore[union-attr]
        assert saved is not None and np.array_equal(saved["base"], built.base)
        if isinstance(vectors.base, PendingBase):
            assert vectors.base.served_by_rows >= 1 and vectors.base.loaded
            assert _search(vectors, QUERIES[0], also) == _search(built, QUERIES[0], also)
    finally:
        storage.close()  # type: ignore[attr-defined]


def test_the_first_query_ranks_as_a_warm_process_does(engine: Engine) -> None:
    store, chat = _many(engine)
    checkpoint(store, chat, 0)
    for query in QUERIES:
        warm = [ranked.memory.id for ranked in rank_memories(store, chat, query, 10)]
        storage, again = _reopened(engine)  # a new process: its first query
        try:
            assert [ranked.memory.id for ranked in rank_memories(again, chat, query, 10)] == warm
        finally:
            storage.close()  # type: ignore[attr-defined]


def test_changes_before_the_block_arrives_and_a_newer_snapshot(engine: Engine) -> None:
    """A memory added or edited before the block has arrived is applied as ever; a block
    saved anew in between (other marks) is not taken: its rows come from the store."""
    store, chat = _many(engine)
    checkpoint(store, chat, 0)
    storage, again = _reopened(engine)
    try:
        vectors = chat_vectors(again, chat)
        first = int(vectors.base_ids[0])
        again.update(first, "Zoe painted a violin")
        new = again.add(chat, "Ana painted the violin blue", "EVENT", source="t")
        checkpoint(store, chat, 0)  # another process saves newer snapshots meanwhile
        vectors = chat_vectors(again, chat)
        assert new in vectors.recent and first in vectors.recent
        warm = chat_vectors(store, chat)  # the other process's, loaded whole, same changes
        assert new in warm.recent and first in warm.recent
        for query in QUERIES:
            assert _search(vectors, query, [new]) == _search(warm, query, [new])
        vectors_loaded(vectors)
        for query in QUERIES:
            assert _search(vectors, query, [new]) == _search(warm, query, [new])
    finally:
        storage.close()  # type: ignore[attr-defined]


def test_snapshots_saved_before_the_codes_load_whole(engine: Engine) -> None:
    """A database whose vectors were saved before `vector codes` existed loads the whole
    snapshot, as before, on either engine."""
    store, chat = _many(engine)
    checkpoint(store, chat, 0)
    engine.run("DELETE FROM memory_rank_snapshots WHERE kind = ?", (VECTOR_CODES,))
    built = ChatVectors.build(store.vector_rows(chat))
    storage, again = _reopened(engine)
    try:
        vectors = chat_vectors(again, chat)
        assert isinstance(vectors.base, np.ndarray)
        assert _search(vectors, QUERIES[1], []) == _search(built, QUERIES[1], [])
    finally:
        storage.close()  # type: ignore[attr-defined]
