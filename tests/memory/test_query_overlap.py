"""The query embedded on a worker thread while the keyword side runs (`memory.retrieval`,
`memory.query_vector.start_query_vector`): the same ranking whether the embedder is slow
or fast, its errors reach the caller as before, and a forked child still embeds."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from memory.embeddings import Embedder
from memory.keyword_cache import bm25_ids, keyword_lists
from memory.query_vector import start_query_vector, vector_for
from memory.retrieval import rank_memories
from memory.store import Changes, Marks
from memory.vector_cache import chat_vectors
from tests.memory.conftest import Engine
from tests.memory.test_store import HashEmbedder

FACTS = [
    "Ann adopted a grey cat called Miso in May",
    "The user plays the cello in a small orchestra",
    "Ann's brother Tom moved to Lisbon for work",
    "The user is learning Portuguese before a trip",
    "Miso the cat sleeps on the piano every afternoon",
    "The orchestra rehearses on Tuesday evenings",
]
QUESTIONS = ["What is Ann's cat called?", "Where did Tom move?", "Which instrument do I play?"]


class SlowEmbedder:
    """The real model, its query vectors late by `delay` seconds; records the threads that
    asked for them."""

    def __init__(self, inner: Embedder, delay: float) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dim = inner.dim
        self.delay = delay
        self.threads: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed(texts)

    def embed_query(self, text: str) -> list[float]:
        self.threads.append(threading.current_thread().name)
        time.sleep(self.delay)
        return self.inner.embed_query(text)


class BrokenEmbedder(SlowEmbedder):
    """Its documents embed; its queries fail as a model that broke at run time would."""

    def embed_query(self, text: str) -> list[float]:
        raise RuntimeError("the query model failed (test)")


def _ranked(engine: Engine, embedder: Embedder, chat_id: int) -> list[list[tuple[int, float]]]:
    store = engine.store(embedder)
    return [
        [(r.memory.id, r.score) for r in rank_memories(store, chat_id, question, 4)]
        for question in QUESTIONS
    ]


def test_slow_or_fast_embedder_gives_the_same_ranking(engine: Engine, embedder: Embedder) -> None:
    chat_id = engine.chat("a")
    store = engine.store(embedder)
    for fact in FACTS:
        store.add(chat_id, fact, "EVENT", source="t")
    fast = _ranked(engine, SlowEmbedder(embedder, 0.0), chat_id)
    slow_embedder = SlowEmbedder(embedder, 0.05)
    slow = _ranked(engine, slow_embedder, chat_id)
    assert slow == fast
    assert fast[0][0][0] == 1  # Miso: a real answer, not two empty lists
    # the keyword side ran meanwhile: the embedding was on another thread
    assert slow_embedder.threads and threading.current_thread().name not in slow_embedder.threads
    # and a change between rankings is seen by both sides, whatever the embedder's pace
    new = store.add(chat_id, "Ann's cat Miso turned three in June", "EVENT", source="t")
    again = _ranked(engine, slow_embedder, chat_id)
    assert again == _ranked(engine, SlowEmbedder(embedder, 0.0), chat_id)
    assert new in {memory_id for memory_id, _ in again[0]}


def test_a_query_ranked_again_reuses_its_vector_without_a_thread(
    engine: Engine, embedder: Embedder
) -> None:
    """The tool loop ranks the same query on every model call of a turn: the vector made
    for the first ranking is handed back at once, not asked of a worker again."""
    chat_id = engine.chat("a")
    store = engine.store(embedder)
    for fact in FACTS:
        store.add(chat_id, fact, "EVENT", source="t")
    slow = SlowEmbedder(embedder, 0.05)
    first = rank_memories(engine.store(slow), chat_id, QUESTIONS[0], 3)
    again = rank_memories(engine.store(slow), chat_id, QUESTIONS[0], 3)
    assert [(r.memory.id, r.score) for r in again] == [(r.memory.id, r.score) for r in first]
    assert len(slow.threads) == 1  # the embedder was not asked again
    rank_memories(engine.store(slow), chat_id, QUESTIONS[1], 3)  # another query: embedded
    assert len(slow.threads) == 2


def test_an_embedder_error_reaches_the_caller_and_the_next_ranking_works(
    engine: Engine, embedder: Embedder
) -> None:
    chat_id = engine.chat("a")
    store = engine.store(embedder)
    for fact in FACTS:
        store.add(chat_id, fact, "EVENT", source="t")
    with pytest.raises(RuntimeError, match="query model failed"):
        rank_memories(engine.store(BrokenEmbedder(embedder, 0.0)), chat_id, QUESTIONS[0], 3)
    best = rank_memories(engine.store(embedder), chat_id, QUESTIONS[0], 1)
    assert best[0].memory.content == FACTS[0]
    # keyword ranking never embeds, so it is untouched by the broken model
    ranked = rank_memories(
        engine.store(BrokenEmbedder(embedder, 0.0)), chat_id, QUESTIONS[1], 1, mode="bm25"
    )
    assert "Lisbon" in ranked[0].memory.content


def _embed_in_child(results: multiprocessing.SimpleQueue[list[float]]) -> None:
    results.put(start_query_vector(HashEmbedder(), "tea with Ann", False).result(timeout=10))


def test_a_forked_child_embeds_on_its_own_worker_threads() -> None:
    """The parent's pool has threads; a forked child has none of them and must make its own
    (else its first ranking would wait forever)."""
    expected = vector_for(HashEmbedder(), "tea with Ann", False)
    assert start_query_vector(HashEmbedder(), "tea with Ann", False).result(timeout=10) == expected
    context = multiprocessing.get_context("fork")
    results: multiprocessing.SimpleQueue[list[float]] = context.SimpleQueue()
    child = context.Process(target=_embed_in_child, args=(results,))
    child.start()
    child.join(timeout=30)
    if child.is_alive():
        child.kill()
        child.join()
    assert child.exitcode == 0
    assert results.get() == expected


def test_a_ranking_reads_the_change_log_once_for_both_sides(
    engine: Engine, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keyword lists and the vectors are current to the same marks: a hybrid ranking
    reads the change log once for both (a round trip on PostgreSQL), and a new memory
    reaches both sides; outside a ranking each derivation reads it as before."""
    chat_id = engine.chat("a")
    store = engine.store(embedder)
    for fact in FACTS:
        store.add(chat_id, fact, "EVENT", source="t")
    rank_memories(store, chat_id, QUESTIONS[0], 3)  # both built, current to the same marks
    reads: list[Marks] = []
    real = store.changes_since

    def counted(chat: int | None, marks: Marks) -> Changes | None:
        reads.append(marks)
        return real(chat, marks)

    monkeypatch.setattr(store, "changes_since", counted)
    assert [r.memory.content for r in rank_memories(store, chat_id, QUESTIONS[0], 1)] == [FACTS[0]]
    assert len(reads) == 1
    new = store.add(chat_id, "Ann's cat Miso learned to open the fridge", "EVENT", source="t")
    reads.clear()
    ranked = rank_memories(store, chat_id, "What did Miso learn to open?", 1)
    assert len(reads) == 1 and ranked[0].memory.id == new
    assert new in dict(bm25_ids(store, chat_id, "fridge", 5))  # the keyword side has it
    assert new in {memory_id for memory_id in chat_vectors(store, chat_id).base_ids} | set(
        chat_vectors(store, chat_id).recent
    )  # and the vector side
    reads.clear()
    keyword_lists(store, chat_id)
    chat_vectors(store, chat_id)
    assert len(reads) == 2  # outside a ranking: one read each, as before
