"""MemoryStore: rows and derived indexes in step, bad input, duplicates, model changes."""

from __future__ import annotations

import hashlib
import logging
import math
from pathlib import Path

import pytest

from core.errors import InputError
from core.storage.database import SqliteDatabase
from core.storage.db import Connection, connect
from core.storage.session_store import DatabaseSessionStore
from core.storage.stores import session_store as session_store_of
from memory import sqlite_index
from memory.embeddings import Embedder
from memory.memory_store import DatabaseMemoryStore
from memory.retrieval import effective_mode, rank_memories
from memory.stores import memory_store as memory_store_of
from memory.terms import token_list
from migrations import migrate
from tests.memory.conftest import Engine


class HashEmbedder:
    """A real, tiny embedder: hashed bag of words (a stand-in for "another model")."""

    def __init__(self, dim: int = 16, model_name: str = "hash-bow") -> None:
        self.dim = dim
        self.model_name = model_name

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors = []
        for text in texts:
            vector = [0.0] * self.dim
            for token in token_list(text):
                vector[hashlib.sha256(token.encode()).digest()[0] % self.dim] += 1.0
            norm = math.sqrt(sum(x * x for x in vector)) or 1.0
            vectors.append([x / norm for x in vector])
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0]


def chat(conn: Connection, name: str) -> int:
    return DatabaseSessionStore(SqliteDatabase(conn)).get_or_create_chat("test", name).id


def test_migration_upgrades_an_old_database_with_rows(tmp_path: Path) -> None:
    old = connect(tmp_path / "old.db", migrate=False)
    migrate(old, upto=1)
    chat_id = DatabaseSessionStore(SqliteDatabase(old)).get_or_create_chat("telegram", "1").id
    old.close()
    upgraded = connect(tmp_path / "old.db")
    store = DatabaseMemoryStore(SqliteDatabase(upgraded))
    memory_id = store.add(chat_id, "likes tea", "PROFILE", source="test")
    assert store.get(memory_id) is not None and store.get(memory_id).chat_id == chat_id
    upgraded.close()


def test_add_get_and_indexes_in_step(engine: Engine, embedder: Embedder) -> None:
    store = engine.store(embedder)
    a = engine.chat("a")
    memory_id = store.add(a, "  The user's   dog is called Rex ", "profile", source="test")
    memory = store.get(memory_id)
    assert memory is not None
    assert (memory.content, memory.category, memory.confidence) == (
        "The user's dog is called Rex",
        "PROFILE",
        0.7,
    )
    assert memory.embedding_model == "all-MiniLM-L6-v2"
    assert memory.created_at.endswith("Z") and "T" in memory.created_at
    assert engine.vector_ids() == {memory_id}
    assert [m.id for m in store.matching(a, "which dog?", 5)] == [memory_id]
    assert engine.index_model() == ("all-MiniLM-L6-v2", 384)


def test_update_touch_archive_delete(engine: Engine, embedder: Embedder) -> None:
    store = engine.store(embedder)
    a = engine.chat("a")
    memory_id = store.add(a, "lives in Berlin", "PROFILE", source="test")
    store.update(memory_id, "lives in Lisbon")
    assert store.get(memory_id).content == "lives in Lisbon"
    assert [r.memory.id for r in rank_memories(engine.store(), a, "Lisbon", 3, mode="bm25")] == [
        memory_id
    ]
    assert rank_memories(engine.store(), a, "Berlin", 3, mode="bm25") == []
    store.touch(memory_id, confidence=0.9)
    assert store.get(memory_id).confidence == 0.9
    store.archive(memory_id)
    assert store.get(memory_id).archived
    assert engine.vector_ids() == set() and store.matching(a, "Lisbon", 5) == []
    assert store.list(a) == [] and len(store.list(a, include_archived=True)) == 1
    store.delete(memory_id)
    assert store.get(memory_id) is None


@pytest.mark.parametrize(
    ("content", "category", "extra"),
    [
        ("   ", "PROFILE", {}),
        ("x" * 2001, "PROFILE", {}),
        ("fine", "OPINION", {}),
        ("fine", "PROFILE", {"confidence": 1.5}),
        ("fine", "PROFILE", {"expires_at": "next tuesday"}),
    ],
)
def test_bad_input_is_a_clear_error_and_stores_nothing(
    engine: Engine, content: str, category: str, extra: dict[str, object]
) -> None:
    store = engine.store()
    with pytest.raises(InputError):
        store.add(engine.chat("a"), content, category, source="test", **extra)
    assert engine.rows("SELECT count(*) FROM memories")[0][0] == 0
    with pytest.raises(InputError, match="no memory with id 99"):
        store.update(99, "anything")


def test_add_joins_the_callers_transaction(engine: Engine) -> None:
    store = engine.store()
    a = engine.chat("a")
    with pytest.raises(RuntimeError), store.transaction():
        store.add(a, "rolled back", "EVENT", source="test")
        raise RuntimeError("abort")
    assert store.list(a) == [] and store.matching(a, "rolled back", 5) == []
    assert engine.rows("SELECT count(*) FROM memory_changes")[0][0] == 0


def test_expiry_is_normalised_to_utc_and_expired_memories_are_not_ranked(
    engine: Engine,
) -> None:
    store = engine.store()
    a = engine.chat("a")
    gone = store.add(a, "sale ends", "EVENT", source="t", expires_at="2020-01-01T02:00+02:00")
    kept = store.add(a, "sale continues", "EVENT", source="t", expires_at="2999-01-01")
    assert store.get(gone).expires_at == "2020-01-01T00:00:00.000Z"
    assert [r.memory.id for r in rank_memories(engine.store(), a, "sale", 5, mode="bm25")] == [kept]
    assert store.expired_ids(10) == [gone]


def test_near_duplicates_by_cosine_and_by_jaccard(engine: Engine, embedder: Embedder) -> None:
    store = engine.store(embedder)
    a, b = engine.chat("a"), engine.chat("b")
    memory_id = store.add(a, "The user's dog is called Rex", "PROFILE", source="test")
    found = store.find_near_duplicate(a, "the user's dog is named Rex")
    assert found is not None and found.id == memory_id
    assert store.find_near_duplicate(a, "The user works as a nurse in Oslo") is None
    assert store.find_near_duplicate(b, "The user's dog is called Rex") is None  # other chat
    by_words = store.find_near_duplicate(a, "user's dog is called Rex", method="jaccard")
    assert by_words is not None and by_words.id == memory_id
    keyword_only = engine.store()
    assert keyword_only.find_near_duplicate(a, "dog called Rex", min_jaccard=0.99) is None


def test_embed_missing_fills_rows_added_without_a_model(engine: Engine, embedder: Embedder) -> None:
    a = engine.chat("a")
    ids = [engine.store().add(a, f"fact number {i}", "KNOWLEDGE", source="t") for i in range(3)]
    store = engine.store(embedder)
    assert store.count_missing_vectors() == 3
    assert store.embed_missing() == 3
    assert engine.vector_ids() == set(ids) and store.count_missing_vectors() == 0


def test_model_change_rebuilds_the_vector_index_instead_of_mixing(
    engine: Engine, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    a = engine.chat("a")
    store = engine.store(embedder)
    ids = [store.add(a, text, "KNOWLEDGE", source="t") for text in ("red apple", "blue sky")]
    other = HashEmbedder()
    with caplog.at_level(logging.WARNING):
        switched = engine.store(other)
        assert switched.count_missing_vectors() == 2
        assert switched.reindex() == 2
    assert "all-MiniLM-L6-v2" in caplog.text and "hash-bow" in caplog.text
    assert engine.index_model() == ("hash-bow", 16)
    assert engine.vector_ids() == set(ids)
    models = {row[0] for row in engine.rows("SELECT embedding_model FROM memories")}
    assert models == {"hash-bow"}
    top = rank_memories(engine.store(other), a, "blue sky", 1, mode="knn")
    assert top[0].memory.id == ids[1]
    # the old model's vectors are gone, so it cannot be used until it rebuilds again
    assert effective_mode(engine.store(embedder), "knn") == "bm25"


def test_known_memory_lookup_stems_and_finds_cjk(engine: Engine) -> None:
    """The reflector's lookup (`matching`): FTS5 on SQLite, full-text search on PostgreSQL:
    the chat's own active memories, stemmed words ("dogs" finds "dog"), CJK bigrams."""
    store = engine.store()
    a, b = engine.chat("a"), engine.chat("b")
    dog = store.add(a, "has a dog called Rex", "PROFILE", source="t")
    tea = store.add(a, "我喜欢喝绿茶", "PROFILE", source="t", context="drinks")
    store.add(b, "has two dogs", "PROFILE", source="t")
    store.add(None, "dogs are global", "KNOWLEDGE", source="t")
    archived = store.add(a, "walks the dogs daily", "EVENT", source="t")
    store.archive(archived)
    assert [m.id for m in store.matching(a, "What about his dogs?", 5)] == [dog]
    assert [m.id for m in store.matching(a, "绿茶", 5)] == [tea]
    assert [m.id for m in store.matching(a, "who drinks?", 5)] == [tea]  # context counts
    assert store.matching(a, 'dog" OR * NEAR(', 5) == [store.get(dog)]  # no syntax leaks
    assert store.matching(a, "the of and", 5) == []


def test_forget_chat_takes_vectors_links_tombstones_and_log(
    engine: Engine, embedder: Embedder
) -> None:
    store = engine.store(embedder)
    a, b = engine.chat("a"), engine.chat("b")
    old = store.add(a, "lives in Berlin", "PROFILE", source="t")
    new = store.add(a, "lives in Lisbon", "PROFILE", source="t")
    store.supersede(old, new)
    kept = store.add(b, "lives in Oslo", "PROFILE", source="t")
    gone = store.add(a, "likes jazz", "PROFILE", source="t")
    store.forget(gone, forgotten_by="Ann")
    assert [t.memory_id for t in store.tombstones(a)] == [gone]
    assert store.forget_chat(a) == 2
    assert engine.vector_ids() == {kept} and store.tombstones(a) == []
    assert engine.rows("SELECT count(*) FROM memory_supersede_edges")[0][0] == 0
    scopes = {row[0] for row in engine.rows("SELECT scope FROM memory_changes")}
    assert a not in scopes and b in scopes


def test_reindex_rebuilds_a_lost_keyword_index(conn: Connection) -> None:
    """SQLite only: its FTS5 table is store-written; PostgreSQL's index is its own."""
    store = DatabaseMemoryStore(SqliteDatabase(conn))
    a = chat(conn, "a")
    memory_id = store.add(a, "plays the violin", "PROFILE", source="t", context="orchestra")
    conn.execute("DELETE FROM memories_fts")
    # ranking reads `memories` itself, so it never depended on the lost rows
    assert [
        r.memory.id
        for r in rank_memories(
            DatabaseMemoryStore(SqliteDatabase(conn)), a, "violin", 3, mode="bm25"
        )
    ] == [memory_id]
    store.reindex()
    found = conn.execute(
        "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?", ('scope:c1 AND "violin"',)
    ).fetchall()
    assert [row[0] for row in found] == [memory_id]
    found = conn.execute(
        "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?", ('context:"orchestra"',)
    ).fetchall()
    assert [row[0] for row in found] == [memory_id]  # the context is indexed again too


def test_an_update_without_a_model_drops_the_old_vector(engine: Engine, embedder: Embedder) -> None:
    """A process without the model edits a memory: the old text's vector must not stay to
    make the near-duplicate check (or KNN) match the old text."""
    a = engine.chat("a")
    memory_id = engine.store(embedder).add(a, "lives in Berlin", "PROFILE", source="t")
    engine.store().update(memory_id, "lives in Lisbon")
    assert engine.vector_ids() == set()
    assert engine.store(embedder).find_near_duplicate(a, "lives in Berlin") is None
    assert engine.store(embedder).embed_missing() == 1 and engine.vector_ids() == {memory_id}


def test_the_sqlite_known_memory_lookup_starts_from_the_full_text_index(conn: Connection) -> None:
    """SQLite only (PostgreSQL plans its own): one MATCH over the index, not one per memory
    of the chat (which took 3 s at 9,000 memories)."""
    plan = sqlite_index.matching_plan(conn)
    assert plan[0].startswith("SCAN f VIRTUAL TABLE"), plan


def test_the_known_memory_lookup_follows_edits_and_ranks_by_matches(engine: Engine) -> None:
    """The lookup's index follows an edit (PostgreSQL: the stored `text_search` vector is
    generated again), and a memory matching more of the query's words comes first."""
    a = engine.chat("a")
    store = engine.store()
    one = store.add(a, "walked the dog by the river", "EVENT", source="t")
    both = store.add(a, "the dog swam in the river near the old mill", "EVENT", source="t")
    store.update(one, "walked the cat by the lake")
    assert [m.id for m in store.matching(a, "dog river mill", 5)] == [both]
    assert [m.id for m in store.matching(a, "cats at a lake", 5)] == [one]


def test_the_postgresql_lookup_ranks_from_the_stored_text_vector(engine: Engine) -> None:
    """PostgreSQL: the lookup matches and ranks by `memories.text_search` (m0025), so no
    row's `to_tsvector` is computed at query time (1.2 s at 100,000 memories before)."""
    if engine.name != "postgresql":
        pytest.skip("SQLite's lookup is FTS5 (see the test above)")
    from memory import pg_index

    a = engine.chat("a")
    engine.store().add(a, "walked the dog by the river", "EVENT", source="t")
    with engine.storage.database.pg.connection() as conn:  # type: ignore[attr-defined]
        plan = "\n".join(pg_index.matching_plan(conn, a, "dog by a river"))
    assert "text_search" in plan and "to_tsvector" not in plan, plan


def test_m0025_fills_the_stored_text_vector_of_existing_memories(fresh_postgres_url: str) -> None:
    """PostgreSQL: a database with memories written before m0025 finds them by the new
    column once upgraded (the column is generated for every existing row)."""
    from core.storage.engine import postgres_storage
    from core.storage.pg_db import PgDatabase

    old = PgDatabase(fresh_postgres_url, migrate=False)
    old.migrate(upto=24)
    storage = postgres_storage(old)
    a = session_store_of(storage).get_or_create_chat("test", "a").id
    kept = memory_store_of(storage).add(a, "rowed a kayak on the fjord", "EVENT", source="t")
    assert old.migrate() == ["m0025_memory_text_search"]
    assert [m.id for m in memory_store_of(storage).matching(a, "kayaks", 5)] == [kept]
    storage.close()
