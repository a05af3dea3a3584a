"""Each chat's episodic recall index held in process, and the hybrid search over it.

The rows (`memory.recall_store`) become the same two structures memories are ranked with:
BM25 posting lists (`memory.posting_lists`) over each message's ranked text (its day, its
speaker and its words) and unit vectors (`memory.vector_cache.ChatVectors`); `search`
fuses them as `rank_memories` does (`score_fusion`), then runs the same second stage
(`memory.second_stage`: the query's named speakers, its time intent, the turns next to
the best hits).

A chat's copy is current while its `IndexState` (row count, newest id) is unchanged; new
rows are appended to the recent segments, anything else (a deletion) rebuilds the copy.
"""

from __future__ import annotations

import bisect
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from zoneinfo import ZoneInfo

from memory.embeddings import Embedder
from memory.expansion import ordered
from memory.posting_lists import PostingLists, query_terms
from memory.query_vector import query_vector
from memory.recall_store import IndexState, RecallRow, RecallStore
from memory.retrieval import KEYWORD_WEIGHT, score_fusion
from memory.second_stage import DEFAULT_STEPS, Stage, leading_speaker, refine
from memory.temporal import date_prefix
from memory.vector_cache import ChatVectors

CACHE_MESSAGES = 300_000  # indexed messages kept in process per database, across chats
DEPTH = 100  # candidates each ranker contributes
# Recall ranks with the name-free query vector on: end to end (`mnemo bench recall`, LoCoMo
# dev) it raised evidence in the request 0.806 -> 0.821, no conversation lower. Its second
# embedding is cached, so the memories' ranking in the same turn can reuse it.
STEPS = DEFAULT_STEPS | {"name-free-query"}
UTC = ZoneInfo("UTC")


@dataclass(frozen=True)
class RecallHit:
    """One recalled message: what was said, by whom, when, and its score."""

    message_id: int
    speaker: str
    content: str
    said_at: str
    day: date | None
    score: float

    def line(self) -> str:
        """`[8 May 2023] Ann: text`: how a hit is shown to the model."""
        return date_prefix(f"{self.speaker}: {self.content}", self.day)


def said_day(said_at: str, zone: ZoneInfo = UTC) -> date | None:
    """The day (in `zone`) of a stored UTC time."""
    try:
        moment = datetime.fromisoformat(said_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(zone).date()


def speaker_of(row: RecallRow) -> str:
    if row.role == "assistant":
        return "assistant"
    return row.speaker or "user"


def ranked_text(row: RecallRow, zone: ZoneInfo = UTC) -> str:
    """What is ranked (and embedded) for a message: `[day] speaker: text`."""
    return date_prefix(f"{speaker_of(row)}: {row.content}", said_day(row.said_at, zone))


@dataclass(frozen=True)
class ChatRecall:
    """One chat's index in process: postings, vectors and each message's id and time."""

    state: IndexState
    lists: PostingLists
    vectors: ChatVectors
    ids: list[int]  # every indexed message id, ascending (for neighbours)
    said: dict[int, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def build(cls, rows: Sequence[RecallRow], zone: ZoneInfo) -> ChatRecall:
        texts = [(row.message_id, ranked_text(row, zone), "") for row in rows]
        vectors = ChatVectors.build(_vector_rows(rows))
        return cls(
            _state_of(rows, IndexState(0, 0)),
            PostingLists.build(texts),
            vectors,
            [row.message_id for row in rows],
            {row.message_id: row.said_at for row in rows},
        )

    def extended(self, rows: Sequence[RecallRow], zone: ZoneInfo) -> ChatRecall:
        """This index with newer `rows` appended."""
        texts = [(row.message_id, ranked_text(row, zone), "") for row in rows]
        return ChatRecall(
            _state_of(rows, self.state),
            self.lists.apply(texts, ()),
            self.vectors.apply(_vector_rows(rows), ()),
            self.ids + [row.message_id for row in rows],
            {**self.said, **{row.message_id: row.said_at for row in rows}},
        )

    def text(self, message_id: int) -> str:
        """The message's words as ranked, without the day in front (that names a time)."""
        item = self.lists.item(message_id)
        text = item.content if item is not None else ""
        return text.split("] ", 1)[1] if text.startswith("[") and "] " in text else text

    def neighbours(self, message_id: int) -> list[int]:
        """The indexed messages just before and after `message_id`."""
        place = bisect.bisect_left(self.ids, message_id)
        return [self.ids[i] for i in (place - 1, place + 1) if 0 <= i < len(self.ids)]


def _fits(index: ChatRecall, rows: Sequence[RecallRow]) -> bool:
    """Whether the rows' vectors have the size of those held (no model change between)."""
    width = index.vectors.width() * 4
    return not width or all(row.embedding is None or len(row.embedding) == width for row in rows)


def _state_of(rows: Sequence[RecallRow], before: IndexState) -> IndexState:
    newest = max((row.message_id for row in rows), default=before.newest)
    return IndexState(before.count + len(rows), max(newest, before.newest))


def _vector_rows(rows: Sequence[RecallRow]) -> list[tuple[int, bytes]]:
    """The rows' vectors of the newest row's size: after a change of embedding model, the
    older model's vectors are left out (never mixed) until the index is rebuilt."""
    vectors = [(row.message_id, row.embedding) for row in rows if row.embedding is not None]
    size = len(vectors[-1][1]) if vectors else 0
    return [(message_id, blob) for message_id, blob in vectors if len(blob) == size]


class _Cache:
    """An LRU of chats' indexes per database, bounded by the messages held."""

    def __init__(self) -> None:
        self.entries: OrderedDict[int, ChatRecall] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, chat_id: int) -> ChatRecall | None:
        with self.lock:
            entry = self.entries.get(chat_id)
            if entry is not None:
                self.entries.move_to_end(chat_id)
            return entry

    def put(self, chat_id: int, value: ChatRecall) -> None:
        with self.lock:
            self.entries[chat_id] = value
            self.entries.move_to_end(chat_id)
            held = sum(len(item) for item in self.entries.values())
            while held > CACHE_MESSAGES and len(self.entries) > 1:
                _, dropped = self.entries.popitem(last=False)
                held -= len(dropped)

    def drop(self, chat_id: int) -> None:
        with self.lock:
            self.entries.pop(chat_id, None)


_caches: weakref.WeakKeyDictionary[object, _Cache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def _cache(store: RecallStore) -> _Cache:
    with _caches_lock:
        return _caches.setdefault(store.cache_key, _Cache())


def forget_cached(store: RecallStore, chat_id: int) -> None:
    """Drop the chat's copy in this process (its rows were deleted)."""
    _cache(store).drop(chat_id)


def load_rows(store: RecallStore, chat_id: int, rows: Sequence[RecallRow], zone: ZoneInfo) -> int:
    """Build the chat's copy from `rows` (all of its index, read by the caller) and keep it:
    the CPU part of a first load, safe to run off the event loop. Returns its size."""
    value = ChatRecall.build(rows, zone)
    _cache(store).put(chat_id, value)
    return len(value)


def chat_recall(store: RecallStore, chat_id: int, zone: ZoneInfo = UTC) -> ChatRecall:
    """The chat's index, brought up to date with its rows."""
    cache = _cache(store)
    entry = cache.get(chat_id)
    state = store.state(chat_id)
    if entry is not None and entry.state == state:
        return entry
    value: ChatRecall | None = None
    if entry is not None and state.count > entry.state.count and state.newest > entry.state.newest:
        new = store.rows(chat_id, after_id=entry.state.newest)
        if entry.state.count + len(new) == state.count and _fits(entry, new):
            value = entry.extended(new, zone)
    if value is None:
        value = ChatRecall.build(store.rows(chat_id), zone)
    if not store.db.in_transaction():
        cache.put(chat_id, value)
    return value


@dataclass(frozen=True)
class RecallQuery:
    """What to look for: the words, and optionally a span of days and a newest message."""

    text: str
    limit: int
    since: date | None = None
    until: date | None = None
    up_to_id: int | None = None  # only messages up to this id (those out of the window)
    today: date | None = None
    speaker: str = ""  # only messages of this speaker (case-insensitive), '' for anyone


def _fused(
    index: ChatRecall, query: str, embedder: Embedder | None, stage: Stage
) -> list[tuple[int, float]]:
    keyword = dict(index.lists.score(query_terms(query), DEPTH)) if query_terms(query) else {}
    semantic: dict[int, float] = {}
    if embedder is not None and len(index.vectors):
        named = "name-free-query" in stage.steps
        vector = query_vector(embedder, query) if named else embedder.embed_query(query)
        if len(vector) == index.vectors.width():  # same model
            nearest, hits = index.vectors.search(vector, DEPTH, list(keyword))
            semantic = dict(nearest) | hits
    return ordered(score_fusion(semantic, keyword, KEYWORD_WEIGHT))


class RecallCandidates:
    """The `memory.second_stage.Candidates` of a search in one chat's index."""

    def __init__(self, index: ChatRecall, zone: ZoneInfo) -> None:
        self.index = index
        self.zone = zone

    def text(self, item: int) -> str:
        return self.index.text(item)

    def day(self, item: int) -> date | None:
        return said_day(self.index.said.get(item, ""), self.zone)

    def speaker(self, item: int) -> str:
        return leading_speaker(self.index.text(item))

    def neighbours(self, item: int) -> list[int]:
        day = self.day(item)
        return [near for near in self.index.neighbours(item) if self.day(near) == day]


def _kept(index: ChatRecall, query: RecallQuery, item: int, zone: ZoneInfo) -> bool:
    if query.up_to_id is not None and item > query.up_to_id:
        return False
    if query.since is None and query.until is None:
        return True
    day = said_day(index.said.get(item, ""), zone)
    if day is None:
        return False
    return (query.since is None or day >= query.since) and (
        query.until is None or day <= query.until
    )


def search_ids(
    store: RecallStore,
    chat_id: int,
    query: RecallQuery,
    embedder: Embedder | None,
    zone: ZoneInfo = UTC,
) -> list[tuple[int, float]]:
    """(message id, score) of the chat's best matches for `query`, best first, filtered by
    its span and newest id; at most `4 * limit` (the caller drops forgotten ones)."""
    index = chat_recall(store, chat_id, zone)
    if not len(index) or not query.text.strip():
        return []
    stage = Stage(STEPS, query.today or date.today())
    first = _fused(index, query.text, embedder, stage)
    ranking = refine(first, query.text, RecallCandidates(index, zone), stage)
    kept = [(item, score) for item, score in ranking if _kept(index, query, item, zone)]
    return kept[: (12 if query.speaker else 4) * query.limit]
