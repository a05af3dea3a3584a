"""The second stage every ranking shares: speaker focus, time intent, neighbours; on the
memories (`rank_memories`, both engines) and on recalled messages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from zoneinfo import ZoneInfo

import pytest

from core.storage.engine import Storage
from memory.memory_candidates import MemoryCandidates, memory_day
from memory.query_vector import name_free, query_vector
from memory.recall import Recaller, RecallSources
from memory.recall_index import RecallQuery
from memory.recall_store import RecallStore
from memory.retrieval import rank_memories
from memory.second_stage import (
    STEPS,
    Stage,
    leading_speaker,
    refine,
    speaker_boost,
    split_day,
)
from memory.store import Memory, MemoryStore, RankText, RankTexts
from memory.temporal import date_prefix
from tests.memory.conftest import Engine
from tests.memory.test_recall import bare_recaller, said

MAY_8 = date(2023, 5, 8)


@dataclass
class Items:
    """A hand-made `Candidates`: texts by id, one day, neighbours by id."""

    texts: dict[int, str]
    near: dict[int, list[int]] = field(default_factory=dict)
    days: dict[int, date] = field(default_factory=dict)

    def text(self, item: int) -> str:
        return split_day(self.texts[item])[1]

    def day(self, item: int) -> date | None:
        return self.days.get(item)

    def speaker(self, item: int) -> str:
        return leading_speaker(self.texts[item])

    def neighbours(self, item: int) -> Sequence[int]:
        return self.near.get(item, [])


def test_split_day_and_leading_speaker() -> None:
    assert split_day("[8 May 2023] Ann: hi") == (MAY_8, "Ann: hi")
    assert split_day("[31 February 2023] x") == (None, "[31 February 2023] x")
    assert split_day("no day") == (None, "no day")
    assert leading_speaker("[8 May 2023] Ann Lee: hi there") == "Ann Lee"
    assert leading_speaker("user: hi") == ""  # not a name
    assert leading_speaker("Ann went: home") == ""
    assert leading_speaker("Ann:hi") == leading_speaker("Ann likes tea") == ""  # no `: `
    assert leading_speaker("[31 February 2023] Ann: hi") == ""  # not a day: not stripped


def test_speaker_boost_raises_what_the_named_person_said() -> None:
    items = Items({1: "Ben: I paint on Sundays", 2: "Ann: I paint to relax", 3: "Ann Lee: hi"})
    ranking = [(1, 1.0), (2, 0.9), (3, 0.1)]
    boosted = speaker_boost(ranking, items, "What does Ann do to relax?")
    assert [item for item, _ in boosted] == [2, 1, 3]
    assert dict(boosted)[3] > 0.1  # a full name matches on one of its words
    assert speaker_boost(ranking, items, "what do people do to relax?") == ranking


def test_refine_runs_only_the_stage_steps() -> None:
    items = Items(
        {1: "Ann: we went hiking", 2: "Ben: lovely, where?", 3: "Ann: near the lake yesterday"},
        near={1: [2], 3: [2]},
        days={1: MAY_8, 2: MAY_8, 3: MAY_8},
    )
    ranking = [(1, 1.0), (3, 0.95)]
    assert [i for i, _ in refine(ranking, "hiking?", items, Stage(frozenset()))] == [1, 3]
    when = refine(ranking, "When did Ann go hiking?", items, Stage(frozenset({"time-intent"})))
    assert [i for i, _ in when] == [3, 1]  # names a time ("yesterday")
    near = refine(ranking, "hiking?", items, Stage(frozenset({"neighbours"})))
    assert [i for i, _ in near] == [1, 3, 2]
    assert Stage().steps == frozenset(STEPS) - {"name-free-query"}


def test_memory_day_reads_the_date_in_front(engine: Engine) -> None:
    chat = engine.chat("a")
    store = engine.store()
    dated = store.add(chat, date_prefix("Ann: went hiking", MAY_8), "EVENT", source="t")
    plain = store.add(chat, "Ann: likes tea", "EVENT", source="t")
    rows = store.rank_texts([dated, plain])
    assert memory_day(rows[dated]) == MAY_8
    assert memory_day(rows[plain]) == date.fromisoformat(rows[plain].created_at[:10])


def test_rank_texts_are_the_rows_fields_in_the_order_asked(engine: Engine) -> None:
    """What the second stage reads of ~140 candidates a query: a `Memory`'s chat, text and
    day, without its other columns; archived ones too (`rank_memories` drops them later)."""
    chat = engine.chat("a")
    store = engine.store()
    ann = store.add(chat, "Ann: likes tea", "EVENT", source="t")
    shared = store.add(None, "everyone likes rain", "KNOWLEDGE", source="t")
    old = store.add(chat, "Ann: liked coffee", "EVENT", source="t")
    store.archive(old)
    texts = store.rank_texts([old, shared, 999_999, ann])
    whole = store.by_ids([old, shared, ann])
    assert list(texts) == [old, shared, ann]
    for memory_id, text in texts.items():
        memory = whole[memory_id]
        assert (text.id, text.chat_id, text.content, text.created_at) == (
            memory.id,
            memory.chat_id,
            memory.content,
            memory.created_at,
        )
    assert store.rank_texts([]) == {}


def test_neighbours_are_the_chats_memories_stored_next_to_a_hit_on_its_day(engine: Engine) -> None:
    chat, other = engine.chat("a"), engine.chat("b")
    store = engine.store()
    day_two = date(2023, 5, 9)
    first = store.add(chat, date_prefix("Ann: where did you go?", MAY_8), "EVENT", source="t")
    store.add(other, "Eve: elsewhere", "EVENT", source="t")  # another chat: never a neighbour
    hit = store.add(chat, date_prefix("Ben: hiking near the lake", MAY_8), "EVENT", source="t")
    later = store.add(chat, date_prefix("Ann: new job", day_two), "EVENT", source="t")
    candidates = MemoryCandidates(store, chat, dict(store.rank_texts([hit, later])))
    assert candidates.neighbours(hit) == [first]  # `later` is on another day
    assert candidates.neighbours(later) == []
    assert [m.id for m in store.adjacent(chat, hit)] == [first, later]
    assert candidates.speaker(hit) == "Ben" and candidates.text(hit).startswith("Ben:")


def _fourteen_lines(engine: Engine) -> tuple[int, list[int], list[int], MemoryStore]:
    """Two days of seven lines in one chat, one archived, and seven in another chat."""
    chat, other = engine.chat("a"), engine.chat("b")
    store = engine.store()
    ids, others = [], []
    for number in range(14):
        day = MAY_8 if number < 7 else date(2023, 5, 9)
        ids.append(store.add(chat, date_prefix(f"Ann: line {number}", day), "EVENT", source="t"))
        others.append(store.add(other, f"Eve: elsewhere {number}", "EVENT", source="t"))
    store.archive(ids[4])
    return chat, ids, others, store


class CountingStore:
    """The real store, counting the reads the second stage makes through it (the seeds
    whose neighbours each read asks for)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.reads: list[list[int]] = []

    def adjacent(self, chat_id: int, memory_id: int) -> list[Memory]:
        self.reads.append([memory_id])
        return self.store.adjacent(chat_id, memory_id)

    def adjacent_many(self, chat_id: int, memory_ids: Sequence[int]) -> dict[int, list[Memory]]:
        self.reads.append(list(memory_ids))
        return self.store.adjacent_many(chat_id, memory_ids)

    def rank_texts(self, ids: Sequence[int]) -> dict[int, RankText]:
        self.reads.append([])
        return self.store.rank_texts(ids)

    def rank_texts_around(
        self, chat_id: int, ids: Sequence[int], seeds: Sequence[int]
    ) -> tuple[dict[int, RankText], dict[int, RankTexts]]:
        self.reads.append(list(seeds))
        return self.store.rank_texts_around(chat_id, ids, seeds)


def test_the_best_candidates_neighbours_come_in_one_read(engine: Engine) -> None:
    """Asked for the five best items' neighbours, `MemoryCandidates` reads once (one round
    trip on PostgreSQL, five before); each answer is `adjacent`'s, kept to the item's day."""
    chat, ids, others, store = _fourteen_lines(engine)  # ids[4] archived: nobody's neighbour
    other = engine.chat("b")
    best = [ids[9], ids[2], ids[13], ids[0], ids[5], ids[6], ids[11]]
    rows = dict(store.rank_texts(best))
    assert list(rows) == best  # in the order asked
    counting = CountingStore(store)
    candidates = MemoryCandidates(counting, chat, rows)  # type: ignore[arg-type]
    found = {item: candidates.neighbours(item) for item in best[:5]}
    assert len(counting.reads) == 1 and counting.reads[0][:5] == best[:5]
    assert found == {
        ids[9]: [ids[8], ids[10]],
        ids[2]: [ids[1], ids[3]],
        ids[13]: [ids[12]],  # the newest: nothing after it
        ids[0]: [ids[1]],  # the oldest
        ids[5]: [ids[3], ids[6]],  # ids[4] is archived
    }
    assert found[ids[9]] == [m.id for m in store.adjacent(chat, ids[9])]
    assert candidates.neighbours(ids[6]) == [ids[5]]  # read ahead too; ids[7] is on May 9
    assert len(counting.reads) == 1
    assert candidates.neighbours(ids[8]) == [ids[7], ids[9]]  # not read ahead: a second read
    assert len(counting.reads) == 2
    assert store.adjacent_many(chat, []) == {}
    around = store.adjacent_many(other, [ids[3]])  # the other chat's memories around it
    assert {item: [m.id for m in near] for item, near in around.items()} == {
        ids[3]: [others[2], others[3]]
    }


def test_rank_texts_around_are_rank_texts_and_adjacent_many_in_one(engine: Engine) -> None:
    """One read gives what `rank_texts` and `adjacent_many` give apart (the neighbours as
    `RankText`s), whatever the seeds: another chat's memory, an archived one, none."""
    chat, ids, others, store = _fourteen_lines(engine)
    shared = store.add(None, "everyone likes rain", "KNOWLEDGE", source="t")
    asked = [ids[9], shared, ids[4], 999_999, others[2], ids[0]]
    seeds = [ids[9], ids[13], ids[5], others[3], shared, ids[9]]
    texts, near = store.rank_texts_around(chat, asked, seeds)
    assert texts == store.rank_texts(asked)
    assert list(texts) == [ids[9], shared, ids[4], others[2], ids[0]]
    apart = store.adjacent_many(chat, seeds)
    assert set(near) == set(apart)
    for seed, found in near.items():
        assert found == [RankText(m.id, m.chat_id, m.content, m.created_at) for m in apart[seed]]
    assert [t.id for t in near[ids[5]]] == [ids[3], ids[6]]  # ids[4] is archived
    assert [t.id for t in near[others[3]]] == [ids[3], ids[5]]  # this chat's, around its id
    assert store.rank_texts_around(chat, asked, []) == (store.rank_texts(asked), {})
    assert store.rank_texts_around(chat, [], []) == ({}, {})
    assert store.rank_texts_around(chat, [], [ids[1]]) == (
        {},
        {ids[1]: list(near_of(store, chat, ids[1]))},
    )


def near_of(store: MemoryStore, chat: int, item: int) -> list[RankText]:
    return [RankText(m.id, m.chat_id, m.content, m.created_at) for m in store.adjacent(chat, item)]


def test_candidates_and_their_best_neighbours_come_in_one_read(engine: Engine) -> None:
    """`MemoryCandidates.read`: the candidates' rows and the first stage's best ones'
    neighbours in one read (one round trip on PostgreSQL, two before); the answers are the
    same as read on demand; a candidate further down has its neighbours read when asked."""
    chat, ids, _, store = _fourteen_lines(engine)
    best = [ids[9], ids[2], ids[13], ids[0], ids[5], ids[6], ids[11]]
    best += [ids[number] for number in (1, 3, 7, 10, 12)]  # twelve: NEIGHBOURS_WITH_ROWS
    best += [ids[8]]
    counting = CountingStore(store)
    candidates = MemoryCandidates.read(counting, chat, best)  # type: ignore[arg-type]
    on_demand = MemoryCandidates(store, chat, dict(store.rank_texts(best)))
    assert list(candidates.rows) == best
    found = {item: candidates.neighbours(item) for item in best[:12]}
    assert counting.reads == [best[:12]]
    assert found == {item: on_demand.neighbours(item) for item in best[:12]}
    assert found[ids[5]] == [ids[3], ids[6]] and found[ids[6]] == [ids[5]]
    assert candidates.neighbours(ids[8]) == [ids[7], ids[9]]  # not read with the rows
    assert len(counting.reads) == 2
    assert candidates.day(ids[8]) == date(2023, 5, 9) and candidates.speaker(ids[8]) == "Ann"


def test_rank_memories_runs_the_second_stage(engine: Engine) -> None:
    """The turn before a hit comes in (neighbours); the named speaker's line wins a tie."""
    chat = engine.chat("a")
    store = engine.store()
    lines = [
        "Ann: what did you paint last weekend?",
        "Ben: a sunset over the harbour",
        "Ann: I also paint sunsets",
        "Ben: unrelated words about trains",
    ]
    ids = [store.add(chat, date_prefix(text, MAY_8), "EVENT", source="t") for text in lines]
    plain = rank_memories(store, chat, "sunset paint Ben", 3, mode="bm25", stage=Stage(frozenset()))
    assert ids[0] not in [r.memory.id for r in plain]
    full = rank_memories(store, chat, "sunset paint Ben", 3, mode="bm25", stage=Stage(today=MAY_8))
    assert full[0].memory.id == ids[1]  # said by Ben
    assert ids[0] in [r.memory.id for r in full]  # the question before Ben's answer


async def test_recall_search_raises_the_named_speakers_messages(storage: Storage) -> None:
    recaller = bare_recaller(storage)
    chat = said(
        storage,
        "pair",
        [
            ("Ann", "my pottery class was fun", "2023-05-08T10:00:00Z"),
            ("Bob", "my pottery class was fun", "2023-05-20T10:00:00Z"),
        ],
    )
    await recaller.catch_up(chat)
    [hit] = recaller.search(chat, RecallQuery("What class does Ann take? pottery", 1))
    assert hit.speaker == "Ann"
    [hit] = recaller.search(chat, RecallQuery("What class does Bob take? pottery", 1))
    assert hit.speaker == "Bob"


class Recording:
    """An embedder that gives each text a fixed vector and notes what it embedded."""

    model_name = "recording"
    dim = 3

    def __init__(self) -> None:
        self.queries: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return [1.0, 0.0, 0.0] if "Ann" in text else [0.0, 1.0, 0.0]


def test_a_query_naming_someone_is_ranked_with_and_without_the_names() -> None:
    assert name_free("What did Ann's sister paint in May?") == "What did sister paint in"
    assert name_free("what did she paint?") == ""
    embedder = Recording()
    vector = query_vector(embedder, "What does Ann paint?")
    assert embedder.queries == ["What does Ann paint?", "What does paint"]
    assert vector == pytest.approx([2**-0.5, 2**-0.5, 0.0])
    assert query_vector(embedder, "what do you paint?") == [0.0, 1.0, 0.0]


async def test_recall_ranks_with_the_name_free_vector(storage: Storage) -> None:
    """Recall's search embeds a query naming someone with and without the names."""
    embedder = Recording()
    sources = RecallSources(lambda: embedder, lambda chat_id: [])
    recaller = Recaller(RecallStore(storage.database), sources, ZoneInfo("UTC"))
    chat = said(storage, "pair", [("Ann", "my pottery class was fun", "2023-05-08T10:00:00Z")])
    await recaller.catch_up(chat)
    embedder.queries.clear()
    assert recaller.search(chat, RecallQuery("What class does Ann take?", 1))
    assert embedder.queries == ["What class does Ann take?", "What class does take"]
