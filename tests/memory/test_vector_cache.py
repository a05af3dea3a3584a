"""The chats' vectors held in memory: exact, and kept equal to a fresh build through changes."""

from __future__ import annotations

import random

import numpy as np
import pytest

from core.storage.database import SqliteDatabase
from core.storage.db import Connection
from memory import vector_cache
from memory.memory_store import DatabaseMemoryStore
from memory.vector_cache import ChatVectors, chat_vectors
from tests.memory.test_store import HashEmbedder, chat

WORDS = ["red", "blue", "garden", "roses", "tea", "coffee", "cats", "dogs", "piano", "rain"]


def as_dict(vectors: ChatVectors, query: list[float]) -> dict[int, float]:
    nearest, _ = vectors.search(query, 10_000)
    return dict(nearest)


def test_search_is_exact_up_to_float16_and_gathers_the_asked_ids() -> None:
    rng = np.random.default_rng(1)
    matrix = rng.normal(size=(50, 8)).astype(np.float32)
    rows = [(i + 1, matrix[i].tobytes()) for i in range(50)]
    vectors = ChatVectors.build(rows)
    query = rng.normal(size=8).tolist()
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    expected = unit @ (np.asarray(query) / np.linalg.norm(query))
    nearest, hits = vectors.search(query, 5, also=[3, 7, 999])
    assert [mid for mid, _ in nearest] == [int(i) + 1 for i in np.argsort(-expected)[:5]]
    assert nearest[0][1] == pytest.approx(float(expected.max()), abs=1e-3)
    assert set(hits) == {3, 7} and hits[3] == pytest.approx(float(expected[2]), abs=1e-3)
    assert ChatVectors.build([]).search(query, 5) == ([], {})


@pytest.mark.parametrize("recent_min", [256, 2])
def test_random_changes_keep_every_chat_equal_to_a_fresh_build(
    conn: Connection, monkeypatch: pytest.MonkeyPatch, recent_min: int
) -> None:
    monkeypatch.setattr(vector_cache, "RECENT_MIN", recent_min)
    rng = random.Random(5)
    chats = [chat(conn, name) for name in "abc"]
    embedder = HashEmbedder()
    store = DatabaseMemoryStore(SqliteDatabase(conn), embedder)
    plain = DatabaseMemoryStore(SqliteDatabase(conn))  # stores without a vector, embedded later
    live: list[int] = []
    scopes = [*chats, None]

    def text() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5)))

    for step in range(120):
        action = rng.random()
        if action < 0.35 or not live:
            live.append(store.add(rng.choice(scopes), text(), "EVENT", source="t"))
        elif action < 0.45:
            live.append(plain.add(rng.choice(scopes), text(), "EVENT", source="t"))
        elif action < 0.55:
            store.embed_missing()
        elif action < 0.7:
            store.update(rng.choice(live), text())
        elif action < 0.8:
            store.archive(live.pop(rng.randrange(len(live))))
        elif action < 0.9:
            conn.execute(
                "UPDATE memories SET chat_id = ? WHERE id = ?",
                (rng.choice(chats), rng.choice(live)),
            )
        else:
            store.delete(live.pop(rng.randrange(len(live))))
        if step % 4 == 0:
            query = embedder.embed_query(text())
            for chat_id in scopes:
                fresh = ChatVectors.build(store.vector_rows(chat_id))
                ours = as_dict(chat_vectors(store, chat_id), query)
                expected = as_dict(fresh, query)
                assert ours.keys() == expected.keys()
                assert all(abs(ours[k] - expected[k]) < 1e-3 for k in ours)  # float16 base


def test_a_memory_embedded_later_reaches_the_held_vectors(conn: Connection) -> None:
    """A vector written after the memory (model load, reindex, upkeep) is a logged change."""
    a = chat(conn, "a")
    embedder = HashEmbedder()
    store = DatabaseMemoryStore(SqliteDatabase(conn), embedder)
    first = store.add(a, "tea in the garden", "EVENT", source="t")
    later = DatabaseMemoryStore(SqliteDatabase(conn)).add(a, "roses and rain", "EVENT", source="t")
    query = embedder.embed_query("roses rain")
    assert set(as_dict(chat_vectors(store, a), query)) == {first}
    assert store.embed_missing() == 1
    assert set(as_dict(chat_vectors(store, a), query)) == {first, later}


def test_sign_bit_search_is_near_exact_and_skips_masked_rows() -> None:
    """Past `rescore_count(k)` vectors a search scores only the nearest sign codes: its top
    10 stay those of an exact scan, and a removed vector is never found."""
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(30, 64))
    matrix = (np.repeat(centres, 100, axis=0) + rng.normal(0, 0.6, (3000, 64))).astype(np.float32)
    vectors = ChatVectors.build([(i + 1, matrix[i].tobytes()) for i in range(3000)])
    assert len(vectors.base_ids) > vector_cache.rescore_count(10)
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    found = 0
    for centre in centres:
        query = (centre + rng.normal(0, 0.3, 64)).astype(np.float32)
        exact = set((np.argsort(-(unit @ query))[:10] + 1).tolist())
        nearest, _ = vectors.search(query.tolist(), 10)
        found += len(exact & {memory_id for memory_id, _ in nearest})
    assert found / (10 * len(centres)) >= 0.98
    query = matrix[41].tolist()
    assert vectors.search(query, 1)[0][0][0] == 42
    without = vectors.apply([], [42])
    assert 42 not in dict(without.search(query, 50)[0])
    assert without.search(query, 5, also=[42, 43])[1].keys() == {43}


def test_recent_vectors_are_appended_in_place_and_searched_exactly() -> None:
    """A recent segment grows to thousands of vectors before it merges: a change appends its
    rows to the block the versions share (nothing re-stacked), a search scores them in place
    and as before, and a version that is not the newest copies instead of appending."""
    rng = np.random.default_rng(3)
    matrix = rng.normal(size=(40, 8)).astype(np.float32)
    base = ChatVectors.build([(i + 1, matrix[i].tobytes()) for i in range(30)])
    vectors = base.apply([(i + 1, matrix[i].tobytes()) for i in range(30, 40)], [])
    assert len(vectors.recent) == 10 and not base.recent
    query = rng.normal(size=8).tolist()
    first = vectors.search(query, 40)
    assert vectors.search(query, 40) == first
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    expected = unit @ (np.asarray(query, np.float32) / np.linalg.norm(query))
    assert [mid for mid, _ in first[0]][:5] == [int(i) + 1 for i in np.argsort(-expected)[:5]]
    recent_ids = {mid: sim for mid, sim in first[0] if mid > 30}
    # float32 sums in another order (numpy's kernels differ by CPU): equal to ~1e-7
    exact = {i + 1: float(expected[i]) for i in range(30, 40)}
    assert recent_ids == pytest.approx(exact, rel=1e-6, abs=1e-6)
    newer = vectors.apply([(35, matrix[0].tobytes())], [36])  # one changed, one gone
    assert newer.recent.block is vectors.recent.block  # appended, not copied
    assert list(newer.recent) == [31, 32, 33, 34, 37, 38, 39, 40, 35]
    assert list(vectors.recent) == list(range(31, 41))  # the older version sees no change
    assert vectors.search(query, 40) == first
    other = vectors.apply([(7, matrix[1].tobytes())], [])  # the same version changed again
    assert other.recent.block is not vectors.recent.block  # copied: `newer` keeps its rows
    assert list(other.recent) == [*range(31, 41), 7] and 7 not in newer.recent
    assert np.array_equal(newer.recent[35], unit[0]) and np.array_equal(other.recent[7], unit[1])
    assert dict(newer.search(query, 40)[0])[35] == pytest.approx(float(expected[0]), abs=1e-3)


def test_a_merge_keeps_the_base_codes_and_makes_only_the_recent_ones() -> None:
    """Merging takes the base rows' sign codes as they are and makes the recent rows' from
    their float16 form: the codes a build of the merged rows makes, bit for bit (a value too
    small for float16 is no positive bit)."""
    rng = np.random.default_rng(8)
    matrix = rng.normal(size=(300, 70)).astype(np.float32)
    matrix[:, 5] = 1e-9  # positive in float32, zero in float16
    vectors = ChatVectors.build([(i * 2, matrix[i].tobytes()) for i in range(200)])
    changed = vectors.apply([(i * 2 + 1, matrix[i].tobytes()) for i in range(200, 300)], [0, 8])
    merged = changed.merged()
    assert np.array_equal(merged.codes, vector_cache.sign_codes(merged.base))
    assert merged.codes.flags.c_contiguous and len(merged.base_ids) == 298
    rebuilt = ChatVectors(merged.base_ids, merged.base, merged.alive)  # codes made anew
    query = rng.normal(size=70).tolist()
    assert merged.search(query, 20) == rebuilt.search(query, 20)
