"""Keyword ranking: BM25 equal to FTS5's, Jaccard over stems, lists kept current by the log."""

from __future__ import annotations

import random

import pytest

from core.storage.database import SqliteDatabase
from core.storage.db import Connection
from core.storage.session_store import DatabaseSessionStore
from memory import change_log_store, keyword_cache, posting_lists
from memory.keyword_cache import bm25_ids, jaccard_ids, keyword_lists
from memory.posting_lists import PostingLists, memory_stems, query_terms
from memory.stores import memory_store
from memory.terms import jaccard_sets, token_list
from tests.memory.conftest import Engine

# Words whose Porter stems FTS5 and PyStemmer agree on, so both indexes hold the same terms.
ROWS = [
    (1, "the garden has red roses and red tulips", "spring planting"),
    (2, "roses need water every morning", ""),
    (3, "my brother grows tomatoes in the garden", "weekend plans for the garden"),
    (4, "tulips bloom in april", "what flowers bloom early"),
    (5, "the kitchen window faces the garden and the street", ""),
]
CHANGED_ROWS = [ROWS[0], (2, "roses need sun", ""), *ROWS[3:], (6, "tulips and roses", "")]
QUERIES = ["garden roses", "red tulips bloom", "water", "street kitchen", "sun tulips"]


def chat(conn: Connection, name: str) -> int:
    return DatabaseSessionStore(SqliteDatabase(conn)).get_or_create_chat("test", name).id


def fts5_scores(conn: Connection, query: str) -> dict[int, float]:
    """-bm25() of FTS5 itself over the same rows, content weight 1.0 and context 0.5."""
    conn.execute(
        "CREATE VIRTUAL TABLE temp.reference USING fts5(text, context, tokenize='porter unicode61')"
    )
    conn.executemany("INSERT INTO reference (rowid, text, context) VALUES (?, ?, ?)", ROWS)
    terms = " OR ".join(f'"{term}"' for term in dict.fromkeys(token_list(query)))
    found = conn.execute(
        "SELECT rowid, -bm25(reference, 1.0, 0.5) FROM reference WHERE reference MATCH ?",
        (terms,),
    ).fetchall()
    return {int(row[0]): float(row[1]) for row in found}


def assert_same_ranking(ours: PostingLists, expected: PostingLists, queries: list[str]) -> None:
    """Same hits with the same BM25 scores and Jaccard overlaps, query by query."""
    for query in queries:
        terms = query_terms(query)
        for got, wanted in (
            (ours.score(terms, 1000), expected.score(terms, 1000)),
            (ours.jaccard(terms), expected.jaccard(terms)),
        ):
            assert dict(got) == pytest.approx(dict(wanted), rel=1e-9, abs=1e-12), query


@pytest.mark.parametrize("query", QUERIES[:4])
def test_bm25_equals_fts5(conn: Connection, query: str) -> None:
    ours = dict(PostingLists.build(ROWS).score(query_terms(query), 10))
    expected = fts5_scores(conn, query)
    assert set(ours) == set(expected)
    for memory_id, score in expected.items():
        assert ours[memory_id] == pytest.approx(score, rel=1e-9), memory_id


def test_score_orders_best_first_and_stops_at_depth() -> None:
    found = PostingLists.build(ROWS).score(query_terms("garden roses tulips"), 2)
    assert len(found) == 2
    assert found[0][1] >= found[1][1] > 0
    full = PostingLists.build(ROWS).score(query_terms("garden roses tulips"), 10)
    assert found == full[:2]
    assert PostingLists.build(ROWS).score(["nothing"], 10) == []
    assert PostingLists.build([]).score(["garden"], 10) == []
    assert PostingLists.build([]).jaccard(["garden"]) == []


def test_jaccard_compares_content_stem_sets() -> None:
    lists = PostingLists.build(ROWS)
    for query in [*QUERIES, "the roses of the garden", "bloomed tulip"]:
        wanted = set(query_terms(query))
        expected = {
            memory_id: jaccard_sets(wanted, memory_stems(content))
            for memory_id, content, _ in ROWS
            if wanted & memory_stems(content)
        }
        found = lists.jaccard(query_terms(query))
        assert dict(found) == pytest.approx(expected), query
        assert [score for _, score in found] == sorted(expected.values(), reverse=True)
    # context words are not part of a memory's set
    assert lists.jaccard(query_terms("planting")) == []


def test_a_rebuild_reuses_the_tokenisation_of_unchanged_memories() -> None:
    first = PostingLists.build(ROWS)
    again = PostingLists.build(CHANGED_ROWS, first)
    assert again.base.rows[1] is first.base.rows[1] and again.base.rows[5] is first.base.rows[5]
    assert again.base.rows[2] is not first.base.rows[2]
    assert 3 not in again.base.rows and 6 in again.base.rows
    assert first.score(query_terms("sun"), 10) == []  # the old lists are left as they were
    assert_same_ranking(again, PostingLists.build(CHANGED_ROWS), QUERIES)


def test_applied_changes_rank_as_a_fresh_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(posting_lists, "MASKED_SHARE", 0.5)  # 2 of 5 masked: no merge yet
    first = PostingLists.build(ROWS)
    changed = first.apply([(2, "roses need sun", ""), (6, "tulips and roses", "")], [3])
    assert changed.base is first.base  # masked, not rebuilt
    assert sorted(changed.recent.rows) == [2, 6] and len(changed) == 5
    assert_same_ranking(changed, PostingLists.build(CHANGED_ROWS), QUERIES)
    assert first.score(query_terms("sun"), 10) == []  # the old snapshot is unchanged
    assert len(first.score(query_terms("tomatoes"), 10)) == 1


def test_changes_keep_bm25_bit_equal_without_a_pass_over_the_whole_chat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A change keeps the live memories' token total current instead of re-reading every
    memory's length, and scores only the postings a query reads: the same bits as a fresh
    build, and the two segments' ids are never joined for it."""
    monkeypatch.setattr(posting_lists, "MASKED_SHARE", 0.9)
    rng = random.Random(4)
    words = ["garden", "roses", "red", "tulips", "water", "sun", "kitchen", "street", "april"]
    rows = {i: (i, " ".join(rng.choices(words, k=rng.randint(2, 9))), "") for i in range(1, 40)}
    lists = PostingLists.build(rows.values())
    for step in range(30):
        memory_id = rng.randint(1, 50)
        if step % 4 == 3 and memory_id in rows:
            del rows[memory_id]
            lists = lists.apply([], [memory_id])
        else:
            rows[memory_id] = (memory_id, " ".join(rng.choices(words, k=rng.randint(1, 12))), "")
            lists = lists.apply([rows[memory_id]], [])
        fresh = PostingLists.build(rows.values())
        assert lists.average == fresh.average and lists.count == fresh.count
        for query in ("garden roses", "sun water april", "tomatoes"):
            terms = query_terms(query)  # ties may come in another order: compare as dicts
            assert dict(lists.score(terms, 100)) == dict(fresh.score(terms, 100))
        assert "ids" not in vars(lists)  # made only when asked
    assert len(lists.recent.rows) and lists.masked  # both segments took part
    assert sorted(lists.ids[lists.alive.tolist() + [True] * len(lists.recent.ids)]) == sorted(rows)


def test_the_recent_segment_merges_into_the_base(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(posting_lists, "RECENT_MIN", 1)
    monkeypatch.setattr(posting_lists, "RECENT_SHARE", 0.0)
    first = PostingLists.build(ROWS)
    one = first.apply([(6, "tulips and roses", "")], [])
    assert one.base is first.base
    two = one.apply([(2, "roses need sun", "")], [3])  # two recent: merged
    assert two.base is not first.base and not two.recent.rows
    assert two.base.rows[1] is first.base.rows[1]  # merging re-tokenises nothing
    assert_same_ranking(two, PostingLists.build(CHANGED_ROWS), QUERIES)


def test_a_mostly_stale_vocabulary_is_numbered_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(posting_lists, "VOCABULARY_SLACK", 0)
    first = PostingLists.build(ROWS)
    kept = PostingLists.build(ROWS[:4], first)  # most terms still occur: numbers carry over
    assert kept.base.rows[1] is first.base.rows[1]
    small = PostingLists.build([(9, "bees", "")], kept)
    assert small.vocabulary == {"bee": 0} and small.base.rows[9].terms.tolist() == [0]
    assert [mid for mid, _ in small.score(["bee"], 5)] == [9]
    monkeypatch.setattr(posting_lists, "MASKED_SHARE", 0.5)
    shrunk = first.apply([(9, "bees", "")], [1, 2, 3, 4, 5])  # all masked: merged, renumbered
    assert shrunk.vocabulary == {"bee": 0}
    assert_same_ranking(shrunk, small, ["bees", "garden"])


def test_stems_and_diacritics_match_across_word_forms(engine: Engine) -> None:
    a = engine.chat("a")
    store = engine.store()
    hiking = store.add(a, "Went hiking in the Alps", "EVENT", source="t")
    cafe = store.add(a, "Meets Ana at the Café Central", "EVENT", source="t")
    assert [mid for mid, _ in bm25_ids(store, a, "does she like hikes?", 5)] == [hiking]
    assert [mid for mid, _ in bm25_ids(store, a, "which cafe", 5)] == [cafe]
    assert [mid for mid, _ in jaccard_ids(store, a, "the hikes in the alps")] == [hiking]


def test_lists_are_reused_until_the_chat_changes(engine: Engine) -> None:
    a, b = engine.chat("a"), engine.chat("b")
    store = engine.store()
    first = store.add(a, "likes green tea", "PROFILE", source="t")
    cached = keyword_lists(store, a)
    assert keyword_lists(store, a) is cached
    store.touch(first)  # recency only: what ranking reads of rows, not of the lists
    assert keyword_lists(store, a) is cached
    store.add(b, "likes black coffee", "PROFILE", source="t")  # another chat
    assert keyword_lists(store, a) is cached
    for change in (
        lambda: store.add(a, "drinks coffee at noon", "PROFILE", source="t"),
        lambda: store.update(first, "likes jasmine tea"),
        lambda: store.add(None, "the office closes at six", "KNOWLEDGE", source="t"),
        lambda: store.archive(first),
    ):
        before = keyword_lists(store, a)
        change()
        assert keyword_lists(store, a) is not before
    assert [mid for mid, _ in bm25_ids(store, a, "tea", 5)] == []  # archived
    assert len(bm25_ids(store, a, "office coffee", 5)) == 2  # its own and the global one


def test_a_change_re_reads_only_the_memories_it_touched(engine: Engine) -> None:
    a = engine.chat("a")
    store = engine.store()
    old = store.add(a, "keeps two cats", "PROFILE", source="t")
    before = keyword_lists(store, a)
    new = store.add(a, "the cats are called Miso and Tofu", "PROFILE", source="t")
    after = keyword_lists(store, a)
    assert after.base is before.base and list(after.recent.rows) == [new]
    assert {mid for mid, _ in bm25_ids(store, a, "cats", 5)} == {old, new}


@pytest.mark.parametrize("recent_min", [256, 3])
def test_random_changes_keep_every_chat_equal_to_a_fresh_build(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, recent_min: int
) -> None:
    """Adds, edits, moves, archives, expiries and deletes across chats and the global scope,
    with merges along the way: after them, every chat ranks as if built from scratch."""
    monkeypatch.setattr(posting_lists, "RECENT_MIN", recent_min)
    rng = random.Random(3)
    chats = [engine.chat(name) for name in "abc"]
    store = engine.store()
    words = ["red", "blue", "garden", "roses", "tea", "coffee", "cats", "dogs", "piano"]
    words += ["violin", "Kyoto", "Lima", "sun", "rain"]
    live: list[int] = []

    def text() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))

    scopes = [*chats, None]
    for step in range(160):
        action = rng.random()
        if action < 0.45 or not live:
            live.append(store.add(rng.choice(scopes), text(), "EVENT", source="t", context=text()))
        elif action < 0.65:
            store.update(rng.choice(live), text())
        elif action < 0.75:
            target = rng.choice(live)
            engine.run("UPDATE memories SET chat_id = ? WHERE id = ?", (rng.choice(chats), target))
        elif action < 0.85:
            store.archive(live.pop(rng.randrange(len(live))))
        elif action < 0.9:
            engine.run(
                "UPDATE memories SET expires_at = '2000-01-01T00:00:00.000Z' WHERE id = ?",
                (live.pop(rng.randrange(len(live))),),
            )
        else:
            store.delete(live.pop(rng.randrange(len(live))))
        if step % 4 == 0:
            for chat_id in scopes:
                fresh = PostingLists.build(store.ranking_rows(chat_id))
                assert_same_ranking(keyword_lists(store, chat_id), fresh, words[:8] + ["sun rain"])


def test_changes_made_by_another_connection_are_seen(engine: Engine) -> None:
    a = engine.chat("a")
    engine.store().add(a, "owns a sailing boat", "PROFILE", source="t")
    assert len(bm25_ids(engine.store(), a, "boat", 5)) == 1
    other = engine.another_connection()  # e.g. a reflector worker in another process
    try:
        added = memory_store(other).add(a, "the boat is called Wren", "PROFILE", source="t")
        memory_store(other).delete(1)
    finally:
        other.close()
    assert [mid for mid, _ in bm25_ids(engine.store(), a, "boat", 5)] == [added]


def test_uncommitted_writes_are_seen_but_never_kept(engine: Engine) -> None:
    a = engine.chat("a")
    store = engine.store()
    store.add(a, "plays chess on fridays", "PROFILE", source="t")
    committed = keyword_lists(store, a)
    with pytest.raises(RuntimeError), store.transaction():
        store.add(a, "plays chess online", "PROFILE", source="t")
        inside = bm25_ids(store, a, "chess", 5)
        assert len(inside) == 2
        assert keyword_lists(store, a) is not committed
        raise RuntimeError("roll back")
    assert keyword_lists(store, a) is committed
    assert len(bm25_ids(store, a, "chess", 5)) == 1


def test_cache_keeps_at_most_its_budget_of_memories(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyword_cache, "CACHE_MEMORIES", 3)
    store = engine.store()
    chats = [engine.chat(name) for name in "abc"]
    for chat_id in chats:
        store.add(chat_id, "keeps bees", "PROFILE", source="t")
        store.add(chat_id, "sells honey", "PROFILE", source="t")
    first = keyword_lists(store, chats[0])
    keyword_lists(store, chats[1])  # 2 + 2 > 3: the first chat's lists are dropped
    assert keyword_lists(store, chats[0]) is not first
    assert len(bm25_ids(store, chats[2], "honey bees", 5)) == 2


def test_triggers_log_what_ranking_sees(engine: Engine) -> None:
    a, b = engine.chat("a"), engine.chat("b")
    store = engine.store()

    def log() -> list[tuple[int, int]]:
        rows = engine.rows("SELECT scope, memory_id FROM memory_changes ORDER BY seq")
        return [(int(scope), int(memory_id)) for scope, memory_id in rows]

    memory_id = store.add(a, "likes jazz", "PROFILE", source="t")
    assert log() == [(a, memory_id)]
    store.touch(memory_id, confidence=0.9)
    assert len(log()) == 1
    engine.run("UPDATE memories SET chat_id = ? WHERE id = ?", (b, memory_id))
    assert log()[1:] == [(b, memory_id), (a, memory_id)]  # both scopes hear of the move
    store.update(memory_id, "likes free jazz")
    assert log()[3:] == [(b, memory_id)]
    shared = store.add(None, "global fact", "KNOWLEDGE", source="t")
    store.delete(memory_id)
    assert log()[4:] == [(0, shared), (b, memory_id)]


def test_a_pruned_log_rebuilds_lists_that_missed_entries(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(change_log_store, "LOG_PRUNE_AT", 6)
    monkeypatch.setattr(change_log_store, "LOG_KEEP", 2)
    a, b = engine.chat("a"), engine.chat("b")
    store = engine.store()
    first = store.add(a, "grows basil", "PROFILE", source="t")
    store.add(b, "grows mint", "PROFILE", source="t")
    behind = keyword_lists(store, a)
    assert store.prune_change_log() == 0  # 2 rows: under the threshold
    ids = [store.add(b, f"note {n}", "EVENT", source="t") for n in range(3)]
    moved = store.add(b, "grows thyme", "PROFILE", source="t")
    engine.run("UPDATE memories SET chat_id = ? WHERE id = ?", (a, moved))  # logged early
    for memory_id in ids:
        store.delete(memory_id)
    assert store.prune_change_log() > 0
    assert engine.rows("SELECT count(*) FROM memory_changes")[0][0] == 3  # 2 + marker
    after = keyword_lists(store, a)
    assert after is not behind and len(after) == 2
    assert {mid for mid, _ in bm25_ids(store, a, "grows", 5)} == {first, moved}


def test_query_terms_are_distinct_stems_without_stop_words() -> None:
    assert query_terms("What are the roses and the rose doing?") == ["rose"]
    assert query_terms("") == []


def test_token_list_fast_path_matches_the_general_one() -> None:
    text = "Hello, World_foo bar2 Straße café"
    assert token_list(text) == ["hello", "world", "foo", "bar2", "straße", "café"]
    assert token_list(text + " 东京") == [*token_list(text), "东京"]
