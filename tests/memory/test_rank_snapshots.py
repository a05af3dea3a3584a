"""Saved ranking data on both engines: a new connection loads the chat's keyword lists and
vectors from their snapshot (no rebuild), grows them by appending, ranks as a fresh build
does, and a forgotten memory is in no snapshot."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref

import pytest

from core.storage.engine import Storage
from memory import posting_lists
from memory.keyword_cache import KEYWORD_DOCS, KEYWORDS, keyword_lists
from memory.posting_lists import PackedRows, PostingLists, query_terms
from memory.posting_snapshot import DeferredRows, lists_arrays, lists_from_arrays
from memory.rank_snapshots import checkpoint, checkpoint_held
from memory.retrieval import rank_memories
from memory.snapshot_arrays import unpack_arrays
from memory.store import MemoryStore
from memory.stores import memory_store
from memory.vector_cache import (
    VECTOR_CODES,
    VECTORS,
    ChatVectors,
    chat_vectors,
    vectors_loaded,
)
from memory.warm_up import warm_memories
from tests.memory.conftest import Engine
from tests.memory.test_store import HashEmbedder

TEXTS = [
    "Ana plays the violin in Lisbon",
    "Ben fixed a bicycle on Sunday",
    "Chen cooked pasta with basil",
    "Dara painted the garden fence blue",
    "Eli is learning chess openings",
    "Fatima sold her old camera",
    "Goro bought a kayak for the summer",
    "Hana visited Kyoto in spring",
]


def _filled(engine: Engine) -> tuple[MemoryStore, int, list[int]]:
    store = engine.store(HashEmbedder())
    chat = engine.chat("a")
    ids = [store.add(chat, text, "EVENT", source="t") for text in TEXTS]
    store.add(None, "Everyone likes tea with honey", "EVENT", source="t")
    store.add(engine.chat("b"), "Ivan keeps bees near Oslo", "EVENT", source="t")
    return store, chat, ids


def _reopened(engine: Engine) -> tuple[Storage, MemoryStore]:
    """A second connection, as a new process has: nothing held in it."""
    storage = engine.another_connection()
    return storage, memory_store(storage, HashEmbedder())


def same(ours: list[tuple[int, float]], fresh: list[tuple[int, float]]) -> bool:
    """The same ids in the same order, with the same scores."""
    return [i for i, _ in ours] == [i for i, _ in fresh] and all(
        abs(a - b) < 1e-9 for (_, a), (_, b) in zip(ours, fresh, strict=True)
    )


def _ranked(store: MemoryStore, chat: int, query: str) -> list[int]:
    return [ranked.memory.id for ranked in rank_memories(store, chat, query, 5)]


def test_a_new_connection_loads_the_saved_lists_and_grows_them(engine: Engine) -> None:
    store, chat, ids = _filled(engine)
    assert checkpoint(store, chat, 0) == [KEYWORDS, KEYWORD_DOCS, VECTORS, VECTOR_CODES]
    storage, again = _reopened(engine)
    try:
        lists = keyword_lists(again, chat)
        assert isinstance(lists.base.rows, PackedRows)  # loaded, not built from the rows
        assert sorted(lists.ids.tolist()) == sorted(row[0] for row in again.ranking_rows(chat))
        new = again.add(chat, "Ana tunes the violin before the concert", "EVENT", source="t")
        grown = keyword_lists(again, chat)
        assert grown.base is lists.base and grown.recent.ids.tolist() == [new]
        fresh = PostingLists.build(again.ranking_rows(chat))
        terms = query_terms("violin concert in Lisbon")
        assert same(grown.score(terms, 10), fresh.score(terms, 10))
        assert _ranked(again, chat, "violin concert") == _ranked(store, chat, "violin concert")
        assert _ranked(again, chat, "violin concert")[0] == new
        vectors = chat_vectors(again, chat)
        assert new in vectors.recent and len(vectors) == len(fresh)
    finally:
        storage.close()


def test_saved_lists_equal_a_fresh_build_after_changes(engine: Engine) -> None:
    store, chat, ids = _filled(engine)
    checkpoint(store, chat, 0)
    store.update(ids[1], "Ben fixed a motorbike on Monday")
    store.archive(ids[2])
    store.delete(ids[3])
    storage, again = _reopened(engine)
    try:
        for query in ("Ben motorbike", "pasta basil", "garden fence", "tea honey"):
            fresh = PostingLists.build(again.ranking_rows(chat))
            terms = query_terms(query)
            assert same(keyword_lists(again, chat).score(terms, 10), fresh.score(terms, 10))
        assert ids[2] not in keyword_lists(again, chat).ids[keyword_lists(again, chat).alive]
    finally:
        storage.close()


def _saved_ids_and_words(store: MemoryStore, chat: int) -> tuple[set[int], str, set[int]]:
    lists = store.rank_snapshot(chat, KEYWORDS)
    vectors = store.rank_snapshot(chat, VECTORS)
    assert lists is not None and vectors is not None
    arrays = unpack_arrays(lists.data)
    vector_arrays = unpack_arrays(vectors.data)
    assert arrays is not None and vector_arrays is not None
    words = bytes(arrays["vocabulary"]).decode()
    return set(arrays["ids"].tolist()), words, set(vector_arrays["ids"].tolist())


def test_a_forgotten_memory_leaves_every_snapshot(engine: Engine) -> None:
    store, chat, ids = _filled(engine)
    checkpoint(store, chat, 0)
    assert ids[4] in _saved_ids_and_words(store, chat)[0]
    store.forget(ids[4], forgotten_by="user")
    assert store.rank_snapshot(chat, KEYWORDS) is None  # dropped with the memory
    assert store.rank_snapshot(chat, VECTORS) is None
    checkpoint(store, chat)  # saved again (nothing saved: behind)
    saved, words, vector_ids = _saved_ids_and_words(store, chat)
    assert ids[4] not in saved and ids[4] not in vector_ids
    assert "chess" not in words.split("\n") and "opening" not in words.split("\n")
    assert ids[5] in saved and "camera" in words.split("\n")
    storage, again = _reopened(engine)
    try:
        assert ids[4] not in _ranked(again, chat, "chess openings")
    finally:
        storage.close()


def test_a_forgotten_global_memory_leaves_every_chats_snapshot(engine: Engine) -> None:
    store, chat, _ = _filled(engine)
    other = engine.chat("b")
    shared = store.add(None, "Everyone hums the lighthouse song", "EVENT", source="t")
    checkpoint(store, chat, 0)
    checkpoint(store, other, 0)
    store.forget(shared, forgotten_by="user")
    for scope in (chat, other):
        assert store.rank_snapshot(scope, KEYWORDS) is None
        checkpoint(store, scope)
        assert shared not in _saved_ids_and_words(store, scope)[0]


def test_forgetting_a_chat_drops_its_snapshots(engine: Engine) -> None:
    store, chat, _ = _filled(engine)
    other = engine.chat("b")
    checkpoint(store, chat, 0)
    checkpoint(store, other, 0)
    store.forget_chat(chat)
    assert store.rank_snapshot(chat, KEYWORDS) is None
    assert store.rank_snapshot(chat, VECTORS) is None
    assert store.rank_snapshot(other, KEYWORDS) is not None


def test_vectors_of_another_model_are_not_loaded(engine: Engine) -> None:
    store, chat, _ = _filled(engine)
    checkpoint(store, chat, 0)
    storage = engine.another_connection()
    try:
        other = memory_store(storage, HashEmbedder(model_name="other-model"))
        saved = other.rank_snapshot(chat, VECTORS)
        assert saved is not None and saved.model == "hash-bow/16"
        from memory.vector_cache import _load

        assert _load(other, chat) is None
    finally:
        storage.close()


def test_checkpoints_save_only_what_is_behind(engine: Engine) -> None:
    store, chat, _ = _filled(engine)
    every = [KEYWORDS, KEYWORD_DOCS, VECTORS, VECTOR_CODES]
    assert checkpoint(store, chat, least=3) == every  # none saved yet
    assert checkpoint(store, chat, least=3) == []
    store.add(chat, "one more", "EVENT", source="t")
    store.add(chat, "two more", "EVENT", source="t")
    assert checkpoint(store, chat, least=3) == []
    store.add(chat, "three more", "EVENT", source="t")
    assert checkpoint(store, chat, least=3) == every
    store.add(chat, "a fourth", "EVENT", source="t")
    assert checkpoint_held(store, least=1) == 4  # the chats held in this process


def test_the_warm_up_saves_and_the_next_start_loads(engine: Engine) -> None:
    store, chat, _ = _filled(engine)
    assert asyncio.run(warm_memories(store, chat)) == len(store.ranking_rows(chat))
    assert store.rank_snapshot(chat, KEYWORDS) is not None
    storage, again = _reopened(engine)
    try:
        asyncio.run(warm_memories(again, chat))
        assert isinstance(keyword_lists(again, chat).base.rows, PackedRows)
        assert isinstance(chat_vectors(again, chat), ChatVectors)
    finally:
        storage.close()


def test_a_loaded_base_merges_and_renumbers_from_term_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A loaded memory keeps no text: renumbering the vocabulary works from term numbers."""
    monkeypatch.setattr(posting_lists, "VOCABULARY_SLACK", 0)
    rows = [(i, f"word{i} shared", "") for i in range(1, 40)]
    loaded = lists_from_arrays(lists_arrays(PostingLists.build(rows)))
    before = len(loaded.vocabulary)
    removed = loaded.apply([], list(range(1, 35)))  # most of the vocabulary unused: merged
    merged = removed.apply([(100, "shared novel", "")], [])
    fresh = PostingLists.build([*rows[34:], (100, "shared novel", "")])
    for query in ("shared", "word37", "novel", "word3"):
        terms = query_terms(query)
        assert same(merged.score(terms, 10), fresh.score(terms, 10))
    assert len(merged.vocabulary) == 7 < before  # word35..39, share, novel


def test_postgresql_reads_the_vector_snapshot_ahead_of_the_keyword_lists(engine: Engine) -> None:
    """A chat's first query on PostgreSQL: reading its keyword snapshot starts reading its
    vectors' sign codes on another connection, which the vector load then takes (SQLite reads
    each when asked). What is read ahead equals a plain read; saving or dropping snapshots
    drops a read-ahead, so a forgotten memory's vector never comes back through one."""
    store, chat, ids = _filled(engine)
    checkpoint(store, chat, 0)
    plain = {kind: store.rank_snapshot(chat, kind) for kind in (VECTOR_CODES, KEYWORDS)}
    storage, again = _reopened(engine)
    try:
        reader = again._snapshots  # type: ignore[attr-defined]
        keywords = again.rank_snapshot(chat, KEYWORDS)
        vectors = again.rank_snapshot(chat, VECTOR_CODES)
        assert (keywords, vectors) == (plain[KEYWORDS], plain[VECTOR_CODES])
        assert reader.served_ahead == (1 if engine.name == "postgresql" else 0)
        assert _ranked(again, chat, "violin Lisbon")[0] == ids[0]  # its first query
        served = reader.served_ahead
        assert served == (2 if engine.name == "postgresql" else 0)
        again.rank_snapshot(chat, KEYWORDS)
        again.forget(ids[0], forgotten_by="user")  # drops the snapshots and the read-ahead
        assert again.rank_snapshot(chat, VECTOR_CODES) is None
        assert reader.served_ahead == served
    finally:
        storage.close()
    bm25_only = memory_store(engine.storage)  # no embedder: nothing read ahead
    bm25_only.rank_snapshot(chat, KEYWORDS)
    bm25_only.rank_snapshot(chat, VECTOR_CODES)
    assert bm25_only._snapshots.served_ahead == 0  # type: ignore[attr-defined]


def _merged_scores(lists: PostingLists, query: str) -> list[tuple[int, float]]:
    """Scores after merging every memory into one base (which reads each one's terms)."""
    return lists_from_arrays(lists_arrays(lists)).score(query_terms(query), 10)


def test_the_memories_terms_are_read_at_the_first_change_not_the_first_query(
    engine: Engine,
) -> None:
    """The lists load without each memory's term numbers (`KEYWORD_DOCS`, saved apart); a
    query never reads them, the first change does, from the snapshot saved with the lists."""
    store, chat, ids = _filled(engine)
    checkpoint(store, chat, 0)
    storage, again = _reopened(engine)
    try:
        lists = keyword_lists(again, chat)
        assert isinstance(lists.base.rows, DeferredRows)
        _ranked(again, chat, "violin Lisbon")
        assert not lists.base.rows.loaded  # a query reads no term numbers
        new = again.add(chat, "Ana tunes the violin in Porto", "EVENT", source="t")
        again.update(ids[1], "Ben fixed a motorbike on Monday")
        grown = keyword_lists(again, chat)
        assert lists.base.rows.loaded and grown.recent.ids.tolist() == [ids[1], new]
        fresh = PostingLists.build(again.ranking_rows(chat))
        for query in ("violin Porto", "Ben motorbike", "pasta basil"):
            assert same(_merged_scores(grown, query), fresh.score(query_terms(query), 10))
    finally:
        storage.close()


def test_terms_saved_with_newer_lists_are_not_taken(engine: Engine) -> None:
    """Lists saved anew between loading the lists and their first change: their memories'
    terms are made again from the texts, and merging still equals a fresh build."""
    store, chat, ids = _filled(engine)
    checkpoint(store, chat, 0)
    storage, again = _reopened(engine)
    try:
        lists = keyword_lists(again, chat)
        store.update(ids[1], "Ben saw the cherry blossoms")  # the newer lists hold it last
        checkpoint(store, chat, 0)  # another process: newer lists and docs, same memories
        grown = keyword_lists(again, chat)  # the edit: its terms are looked up
        assert lists.base.rows.loaded  # type: ignore[attr-defined]
        fresh = PostingLists.build(again.ranking_rows(chat))
        for query in ("cherry blossoms", "kayak summer", "garden fence blue", "Ana violin"):
            assert same(_merged_scores(grown, query), fresh.score(query_terms(query), 10))
    finally:
        storage.close()


def test_saved_weights_are_exact_in_their_narrow_type() -> None:
    """Weights (sums of 1 and 0.5) are saved as float16 while every one is below 1,024 and
    as float32 past it; either way the loaded lists score as the built ones."""
    usual = PostingLists.build([(1, "bee bee honey", "bee"), (2, "honey cake", "")])
    huge = PostingLists.build([(1, "bee honey", "bee " * 2100), (2, "bee cake", "")])
    for lists, kind in ((usual, "float16"), (huge, "float32")):
        arrays = lists_arrays(lists)
        assert arrays["weights"].dtype.name == kind
        loaded = lists_from_arrays(arrays)
        for query in ("bee", "honey cake"):
            terms = query_terms(query)
            assert same(loaded.score(terms, 10), lists.score(terms, 10))


def test_a_closed_connection_leaves_no_cached_data_behind(engine: Engine) -> None:
    """The data a connection's chats hold (loaded lists whose terms are read later, vectors
    whose float16 block came later) keeps no reference to the store: once the connection is
    closed and dropped, its cache entries go (the cache is keyed by it, weakly)."""
    store, chat, _ = _filled(engine)
    checkpoint(store, chat, 0)
    storage, again = _reopened(engine)
    key = weakref.ref(again.cache_key)
    _ranked(again, chat, "violin Lisbon")
    vectors_loaded(chat_vectors(again, chat))
    storage.close()
    del storage, again
    # On PostgreSQL a thread may still hold the connection for a moment after the close
    # (a read-ahead of the next snapshot, `snapshot_reader`; the pool's workers ending):
    # the entry must go once they let go, within seconds.
    deadline = time.monotonic() + 10
    gc.collect()
    while key() is not None and time.monotonic() < deadline:
        time.sleep(0.02)
        gc.collect()
    assert key() is None
