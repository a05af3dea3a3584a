"""Ranking: each mode on a hand-made corpus, chat isolation, ties, fallbacks, pure helpers."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from core.storage.database import SqliteDatabase
from core.storage.db import connect
from core.storage.engine import sqlite_storage
from core.storage.session_store import DatabaseSessionStore
from memory import retrieval
from memory.embeddings import Embedder, load_embedder
from memory.memory_store import DatabaseMemoryStore
from memory.retrieval import MODES, effective_mode, rank_memories, score_fusion
from memory.second_stage import Stage
from memory.terms import (
    content_terms,
    fts_query,
    jaccard,
    tokens,
)
from tests.memory.conftest import Engine, without_pgvector

CORPUS = {
    "dog": "The user's dog is a golden retriever called Rex",
    "job": "The user works as a nurse at the city hospital",
    "food": "The user is allergic to peanuts and avoids them",
    "trip": "The user travelled to Japan in April and visited Kyoto",
    "car": "The user drives an old red Volvo car",
}
# (query, the memory that answers it): wording differs from the memory on purpose
QUESTIONS = [
    ("What is my dog called?", "dog"),
    ("Where do I work as a nurse?", "job"),
    ("Which food am I allergic to?", "food"),
    ("When did I visit Kyoto?", "trip"),
    ("What car do I drive?", "car"),
]


def corpus(engine: Engine, embedder: Embedder | None, chat_name: str = "a") -> dict[str, int]:
    chat_id = engine.chat(chat_name)
    store = engine.store(embedder)
    return {key: store.add(chat_id, text, "PROFILE", source="t") for key, text in CORPUS.items()}


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_finds_the_known_answer(engine: Engine, embedder: Embedder, mode: str) -> None:
    ids = corpus(engine, embedder)
    chat_id = engine.chat("a")
    for question, key in QUESTIONS:
        ranked = rank_memories(engine.store(embedder), chat_id, question, 3, mode=mode)
        assert ranked, (mode, question)
        assert ranked[0].memory.id == ids[key], (mode, question, ranked[0].memory.content)


def test_semantic_modes_find_paraphrases_keywords_cannot(
    engine: Engine, embedder: Embedder
) -> None:
    ids = corpus(engine, embedder)
    chat_id = engine.chat("a")
    question = "Which pet do I have?"  # no word in common with the dog memory
    assert all(
        r.memory.id != ids["dog"]
        for r in rank_memories(engine.store(), chat_id, question, 5, mode="bm25")
    )
    for mode in ("knn", "hybrid"):
        top = rank_memories(engine.store(embedder), chat_id, question, 1, mode=mode)
        assert top[0].memory.id == ids["dog"], mode


@pytest.mark.parametrize("mode", MODES)
def test_another_chats_memories_are_never_candidates(
    engine: Engine, embedder: Embedder, mode: str
) -> None:
    chats = {name: engine.chat(name) for name in ("a", "b", "c")}
    store = engine.store(embedder)
    owner: dict[int, int | None] = {}
    for name, chat_id in chats.items():
        for text in CORPUS.values():
            owner[store.add(chat_id, f"{text} ({name})", "PROFILE", source="t")] = chat_id
    glob = store.add(None, "The office dog is called Biscuit", "KNOWLEDGE", source="t")
    owner[glob] = None
    for name, chat_id in chats.items():
        for question, _ in QUESTIONS + [("dog called", "")]:
            ranked = rank_memories(engine.store(embedder), chat_id, question, 50, mode=mode)
            assert {owner[r.memory.id] for r in ranked} <= {chat_id, None}, (name, question)
        seen = rank_memories(engine.store(embedder), chat_id, "dog called", 50, mode=mode)
        assert glob in {r.memory.id for r in seen}


def test_ties_break_by_recency(engine: Engine) -> None:
    chat_id = engine.chat("a")
    store = engine.store()
    old = store.add(chat_id, "meeting moved to Friday", "EVENT", source="t")
    new = store.add(chat_id, "meeting moved to Friday", "EVENT", source="t")
    for mode in ("jaccard", "bm25"):
        ranked = rank_memories(engine.store(), chat_id, "when is the meeting", 2, mode=mode)
        assert [r.memory.id for r in ranked] == [new, old]
        assert ranked[0].score == ranked[1].score
    store.touch(old)
    engine.run("UPDATE memories SET last_seen_at = '2999-01-01T00:00:00.000Z' WHERE id = ?", (old,))
    assert rank_memories(engine.store(), chat_id, "meeting", 1, mode="jaccard")[0].memory.id == old


def test_fallback_to_keywords_without_sqlite_vec(
    tmp_path: Path,
    embedder: Embedder,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(retrieval, "_warned_fallback", False)
    conn = connect(tmp_path / "novec.db", load_vec=False)
    assert not conn.info.vec_loaded
    ids = corpus(Engine(sqlite_storage(conn)), embedder)  # stored without vectors, no failure
    chat_id = DatabaseSessionStore(SqliteDatabase(conn)).find_chat("test", "a").id
    assert effective_mode(DatabaseMemoryStore(SqliteDatabase(conn), embedder), "hybrid") == "bm25"
    with caplog.at_level(logging.WARNING, logger="memory.retrieval"):
        first = rank_memories(
            DatabaseMemoryStore(SqliteDatabase(conn), embedder), chat_id, "What car do I drive?", 3
        )
        rank_memories(
            DatabaseMemoryStore(SqliteDatabase(conn), embedder),
            chat_id,
            "What is my dog called?",
            3,
        )
    assert first[0].memory.id == ids["car"]
    warnings = [r for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(warnings) == 1 and "sqlite-vec is not loaded" in warnings[0].getMessage()
    conn.close()
    # once sqlite-vec loads again, the missing vectors are filled and hybrid runs
    again = connect(tmp_path / "novec.db")
    store = DatabaseMemoryStore(SqliteDatabase(again), embedder)
    assert store.embed_missing() == len(CORPUS)
    assert (
        effective_mode(DatabaseMemoryStore(SqliteDatabase(again), embedder), "hybrid") == "hybrid"
    )
    again.close()


def test_postgresql_without_pgvector_ranks_in_process(
    fresh_postgres_url: str, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    """A server without pgvector: vectors are kept as float32 bytes, hybrid and knn rank
    from them in this process and the near-duplicate check scores them here (logged once)."""
    from memory import pg_index

    storage = without_pgvector(fresh_postgres_url)
    engine = Engine(storage)
    ids = corpus(engine, embedder)
    chat_id = engine.chat("a")
    store = engine.store(embedder)
    assert effective_mode(store, "hybrid") == "hybrid"
    assert engine.vector_ids() == set(ids.values())
    for mode in ("knn", "hybrid"):
        top = rank_memories(store, chat_id, "Which pet do I have?", 1, mode=mode)
        assert top[0].memory.id == ids["dog"], mode
    pg_index._warned_in_process = False
    with caplog.at_level(logging.WARNING, logger="memory.pg_index"):
        found = store.find_near_duplicate(chat_id, "the user's dog is a golden retriever, Rex")
        store.find_near_duplicate(chat_id, "The user drives a red Volvo")
    assert found is not None and found.id == ids["dog"]
    assert len([r for r in caplog.records if "pgvector is not installed" in r.message]) == 1
    storage.close()


def test_fallback_when_the_model_cannot_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = str(tmp_path / "no-such-model")
    with caplog.at_level(logging.WARNING, logger="memory.embeddings"):
        assert load_embedder(missing) is None
        assert load_embedder(missing) is None  # cached: one warning, no second attempt
    assert len([r for r in caplog.records if "could not be loaded" in r.getMessage()]) == 1
    conn = connect(tmp_path / "m.db")
    ids = corpus(Engine(sqlite_storage(conn)), None)
    chat_id = DatabaseSessionStore(SqliteDatabase(conn)).find_chat("test", "a").id
    assert effective_mode(DatabaseMemoryStore(SqliteDatabase(conn)), "knn") == "bm25"
    ranked = rank_memories(
        DatabaseMemoryStore(SqliteDatabase(conn)),
        chat_id,
        "Which food am I allergic to?",
        2,
        mode="knn",
    )
    assert ranked[0].memory.id == ids["food"]
    conn.close()


def test_unknown_mode_and_empty_queries(engine: Engine) -> None:
    corpus(engine, None)
    with pytest.raises(ValueError, match="unknown ranking mode"):
        rank_memories(engine.store(), 1, "dog", 3, mode="magic")
    assert rank_memories(engine.store(), 1, "   ", 3, mode="bm25") == []
    assert rank_memories(engine.store(), 1, "dog", 0, mode="bm25") == []


@pytest.mark.parametrize(
    "query", ['"', 'dog" OR "', "NEAR(dog car)", "dog*", "a AND OR NOT", "-x:y", "{text}: z", "😀"]
)
def test_fts_syntax_in_queries_is_harmless(engine: Engine, query: str) -> None:
    corpus(engine, None)
    rank_memories(engine.store(), 1, query, 3, mode="bm25")  # must not raise
    assert all(part.startswith('"') for part in fts_query(query).split(" OR ") if part)


def test_tokens_lowercase_words_and_cjk_bigrams() -> None:
    assert tokens("Hello, WORLD! it's") == {"hello", "world", "it", "s"}
    assert tokens("我喜欢猫") == {"我喜", "喜欢", "欢猫"}
    assert tokens("猫 and 東京タワー") == {"猫", "and", "東京", "京タ", "タワ", "ワー"}
    assert tokens("") == set()


def test_jaccard_values() -> None:
    assert jaccard("the red car", "The red car!") == 1.0
    assert jaccard("red car", "blue car") == pytest.approx(1 / 3)
    assert jaccard("", "") == 0.0
    assert jaccard("我喜欢猫", "我喜欢狗") == pytest.approx(2 / 4)


def test_content_terms_drop_stop_words_unless_nothing_is_left() -> None:
    assert content_terms("What is my dog called?") == ["dog", "called"]
    assert content_terms("who are you") == ["who", "are", "you"]


def test_score_fusion() -> None:
    scores = score_fusion({1: 0.9, 2: 0.5}, {2: 10.0, 3: 5.0}, keyword_weight=0.5)
    assert scores[1] == pytest.approx(0.5)  # best cosine, no keyword match
    assert scores[2] == pytest.approx(0.5)  # worst cosine, best keyword
    assert scores[3] == pytest.approx(0.25)  # no vector: lowest cosine, half the keyword score
    assert score_fusion({}, {}) == {}


def test_time_aware_ranking_raises_dated_memories_for_when_questions(tmp_path: Path) -> None:
    """A "when" question lifts the memory that names a time over an equal keyword match."""
    conn = connect(tmp_path / "time.db")
    chat = DatabaseSessionStore(SqliteDatabase(conn)).get_or_create_chat("test", "1")
    store = DatabaseMemoryStore(SqliteDatabase(conn), None)
    plain = store.add(chat.id, "Ana went to the pottery class", "EVENT", source="test")
    dated = store.add(chat.id, "Ana went to the pottery class yesterday", "EVENT", source="test")
    question = "When did Ana go to the pottery class?"
    flat = rank_memories(store, chat.id, question, 2, mode="bm25", stage=Stage(frozenset()))
    assert flat[0].memory.id == plain  # shorter text: BM25 prefers it
    aware = rank_memories(store, chat.id, question, 2, mode="bm25")
    assert [r.memory.id for r in aware] == [dated, plain]
    same = rank_memories(store, chat.id, "Ana pottery class", 2, mode="bm25")
    assert same[0].memory.id == plain  # no temporal intent: unchanged
    conn.close()
