"""The query embedded on a worker thread while the keyword side runs (`memory.retrieval`,
`memory.query_vector.start_query_vector`): the same ranking whether the embedder is slow
or fast, its errors reach the caller as before, and a forked child still embeds."""

from __future__ import annotations

import multiprocessing
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from memory.embeddings import Embedder
from memory.query_vector import start_query_vector, then_on_worker, vector_for
from memory.retrieval import rank_memories
from memory.store import NewMemory
from memory.vector_cache import rescore_count
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


def test_work_with_the_vector_runs_on_a_worker_as_soon_as_it_is_made() -> None:
    """`then_on_worker` (the chat's sign-code scan in `memory.retrieval`): on the thread
    that made the vector, never on the caller's, also when the vector was made already;
    and a failed vector fails the work with the same error."""
    caller = threading.current_thread().name
    gate = threading.Event()
    ran_on: list[str] = []

    def made() -> list[float]:
        gate.wait(10)
        return [3.0, 4.0]

    def work(vector: list[float]) -> float:
        ran_on.append(threading.current_thread().name)
        return sum(vector)

    with ThreadPoolExecutor(1, thread_name_prefix="maker") as pool:
        pending = pool.submit(made)
        later = then_on_worker(pending, work)
        assert not later.done()  # the caller goes on meanwhile
        gate.set()
        assert later.result(timeout=10) == 7.0
    assert ran_on == ["maker_0"]
    ready: Future[list[float]] = Future()
    ready.set_result([1.0, 2.0])
    assert then_on_worker(ready, work).result(timeout=10) == 3.0
    assert ran_on[-1] != caller and ran_on[-1].startswith("query-vector")
    failed: Future[list[float]] = Future()
    failed.set_exception(RuntimeError("the query model failed (test)"))
    with pytest.raises(RuntimeError, match="query model failed"):
        then_on_worker(failed, work).result(timeout=10)
    assert len(ran_on) == 2  # the work never ran without a vector


def test_a_large_chat_ranks_the_same_with_a_slow_or_fast_embedder(
    engine: Engine, embedder: Embedder
) -> None:
    """Past `rescore_count` vectors the sign-code scan runs on a worker, after the
    embedding or beside the keyword side: the ranking is the same at any embedder pace."""
    chat_id = engine.chat("a")
    store = engine.store(embedder)
    topics = ["cat", "cello", "Lisbon", "Portuguese", "piano", "orchestra", "garden", "tea"]
    store.add_many(
        [
            NewMemory(chat_id, f"Note {n}: Ann talked about the {topics[n % 8]} on day {n}",
                      "EVENT", "t")
            for n in range(400)
        ]
    )  # fmt: skip
    assert len(store.vector_rows(chat_id)) > rescore_count(70)
    fast = _ranked(engine, SlowEmbedder(embedder, 0.0), chat_id)
    slow = _ranked(engine, SlowEmbedder(embedder, 0.05), chat_id)
    assert slow == fast and all(fast)
