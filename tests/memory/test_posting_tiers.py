"""The keyword lists' three segments (base, middle, recent): a change rebuilds only the small
recent segment, and the lists rank exactly as the two-segment lists did (the same ids, order
and scores) at every recent size, through edits and deletions in each segment."""

from __future__ import annotations

import random

import numpy as np

from memory.bench.cli import synthetic_memory, synthetic_query
from memory.posting_lists import (
    Limits,
    PostingLists,
    Segment,
    appended,
    joined,
    query_terms,
    tokenise,
)
from memory.posting_snapshot import lists_arrays, lists_from_arrays
from tests.memory.conftest import Engine

TIERED = Limits(newest=8, recent_min=120, recent_share=0.0, masked_share=0.25)
TWO_SEGMENTS = Limits(newest=10**9, recent_min=120, recent_share=0.0, masked_share=0.25)


def _rankings(lists: PostingLists, queries: list[str]) -> list[object]:
    found: list[object] = []
    for query in queries:
        terms = query_terms(query)
        found += [lists.score(terms, 10), lists.score(terms, 500), lists.jaccard(terms)]
    return found


def _chat(count: int, seed: int) -> tuple[list[tuple[int, str, str]], list[str], random.Random]:
    rng = random.Random(seed)
    rows = [(i, synthetic_memory(rng), "") for i in range(1, count + 1)]
    return rows, [synthetic_query(rng) for _ in range(25)], rng


def test_the_tiers_rank_as_two_segments_at_every_recent_size() -> None:
    rows, queries, rng = _chat(600, 3)
    tiered = PostingLists.build(rows, limits=TIERED)
    plain = PostingLists.build(rows, limits=TWO_SEGMENTS)
    sizes = set()
    for step in range(1, 122):
        row = (1000 + step, synthetic_memory(rng), "in the garden" if step % 7 == 0 else "")
        tiered, plain = tiered.apply([row], []), plain.apply([row], [])
        assert len(tiered.recent.ids) <= TIERED.newest  # a change rebuilds at most this many
        if step in (1, 8, 9, 30, 77, 115, 120, 121):
            sizes.add((len(tiered.middle.ids), len(tiered.recent.ids)))
            assert len(plain.recent.ids) == step % 121  # 121 later ones: merged
            assert _rankings(tiered, queries) == _rankings(plain, queries)
    assert {(0, 1), (9, 0), (108, 7), (0, 0)} <= sizes  # both later segments, then merged
    assert len(tiered.base.ids) == len(plain.base.ids) == len(rows) + 121


def test_edits_and_deletions_in_each_segment_rank_as_before() -> None:
    rows, queries, rng = _chat(400, 5)
    tiered = PostingLists.build(rows, limits=TIERED)
    plain = PostingLists.build(rows, limits=TWO_SEGMENTS)
    live = {row[0]: row for row in rows}
    for step in range(40):
        row = (500 + step, synthetic_memory(rng), "")
        live[row[0]] = row
        tiered, plain = tiered.apply([row], []), plain.apply([row], [])
    base, middle, recent = 7, int(tiered.middle.ids[3]), int(tiered.recent.ids[0])
    assert base in tiered.base.where and middle != recent
    for memory_id in (base, middle, recent):  # an edit in each segment
        live[memory_id] = (memory_id, f"edited {synthetic_memory(rng)}", "")
        tiered, plain = tiered.apply([live[memory_id]], []), plain.apply([live[memory_id]], [])
        assert tiered.item(memory_id) is not None
        assert tiered.item(memory_id).content.startswith("edited")  # type: ignore[union-attr]
        assert _rankings(tiered, queries) == _rankings(plain, queries)
    gone = (11, int(tiered.middle.ids[5]), int(tiered.recent.ids[-1]))
    for memory_id in gone:  # a deletion in each segment
        del live[memory_id]
        tiered, plain = tiered.apply([], [memory_id]), plain.apply([], [memory_id])
        assert tiered.item(memory_id) is None
        assert _rankings(tiered, queries) == _rankings(plain, queries)
    fresh = PostingLists.build(live.values())
    assert tiered.count == fresh.count == len(live) and tiered.average == fresh.average
    for query in queries:  # a fresh build orders ties otherwise: compare as dicts
        terms = query_terms(query)
        assert dict(tiered.score(terms, 1000)) == dict(fresh.score(terms, 1000))
    assert sorted(tiered.memories()) == sorted(live)


def test_joining_segments_gives_the_arrays_of_a_build() -> None:
    vocabulary: dict[str, int] = {}
    rng = random.Random(9)
    items = {i: tokenise(synthetic_memory(rng), "kitchen" * (i % 2), vocabulary) for i in range(60)}
    first = Segment.build(dict(list(items.items())[:40]), len(vocabulary), sparse=True)
    second = Segment.build(dict(list(items.items())[40:]), len(vocabulary), sparse=True)
    alive = np.ones(40, bool)
    alive[[0, 17, 39]] = False
    made = joined([(first, alive), (second, None)], len(vocabulary))
    kept = {key: item for key, item in items.items() if key not in (0, 17, 39)}
    built = Segment.build(kept, len(vocabulary), sparse=True)
    for name in ("ids", "lengths", "distinct", "bounds", "positions", "weights", "in_content"):
        assert np.array_equal(getattr(made, name), getattr(built, name)), name
        assert getattr(made, name).dtype == getattr(built, name).dtype, name
    assert np.array_equal(made.numbers, built.numbers) and dict(made.where) == dict(built.where)
    assert all(made.rows[key] is kept[key] for key in kept)  # nothing tokenised again
    base = Segment.build(dict(list(items.items())[:30]), len(vocabulary))
    later = Segment.build(dict(list(items.items())[30:]), len(vocabulary), sparse=True)
    alive = np.ones(30, bool)
    alive[[2, 3, 29]] = False
    kept = {key: item for key, item in items.items() if key not in (2, 3, 29)}
    made = appended(base, alive, later, kept, len(vocabulary))
    built = Segment.build(kept, len(vocabulary))
    for name in ("ids", "lengths", "distinct", "bounds", "positions", "weights", "in_content"):
        assert np.array_equal(getattr(made, name), getattr(built, name)), name
        assert getattr(made, name).dtype == getattr(built, name).dtype, name
    assert made.numbers is None and dict(made.where) == dict(built.where)


def test_lists_with_a_middle_segment_save_and_load_as_one_base() -> None:
    rows, queries, rng = _chat(200, 7)
    lists = PostingLists.build(rows, limits=TIERED)
    for step in range(20):
        lists = lists.apply([(300 + step, synthetic_memory(rng), "")], [step + 1])
    assert len(lists.middle.ids) and len(lists.recent.ids) and lists.masked
    loaded = lists_from_arrays(lists_arrays(lists))
    assert not len(loaded.middle.ids) and len(loaded) == len(lists)
    for query in queries:
        terms = query_terms(query)
        assert dict(loaded.score(terms, 1000)) == dict(lists.score(terms, 1000))
    grown = loaded.apply([(999, "a note about the kitchen", "")], [])
    assert grown.base is loaded.base and list(grown.recent.rows) == [999]


def test_the_memory_bench_times_queries_after_a_burst(engine: Engine) -> None:
    """`mnemo bench memory`'s "after a burst of new memories": the burst lands in the chat
    at once, then each timed query follows one more new memory; the lists keep up."""
    from memory.bench import cli as bench
    from memory.keyword_cache import keyword_lists

    store, chat = engine.store(), engine.chat("a")
    store.add(chat, "a first note about tea", "EVENT", source="t")
    keyword_lists(store, chat)
    figures = bench._after_burst(store, chat, "bm25", random.Random(2), 0.0, 30)
    assert figures["burst"] == 30 and figures["p95_ms"] >= figures["p50_ms"] > 0
    lists = keyword_lists(store, chat)
    assert len(lists) == 1 + 30 + bench.CHANGED_QUERIES
    assert len(lists.recent.ids) <= 64 and len(lists.middle.ids)  # the tiers took them
