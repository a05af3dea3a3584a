"""`Recaller`: the episodic recall of a chat's every stored message, compacted ones included.

It keeps the index current (`catch_up`: after a turn in the background, before a
compaction in full, before a `conversation_search`), answers searches (`search`), and
builds the "recalled" section of a request: the best matches that are out of the visible
window, each with its date, within what the memory section left of the shared budget.
Messages that carry a forgotten memory (a tombstone of the chat) are never recalled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from zoneinfo import ZoneInfo

import numpy as np

from core.clock import iso_utc, utc_now
from memory.embeddings import Embedder
from memory.forgetting import fact_terms, repeats_by_terms
from memory.recall_index import (
    RecallHit,
    RecallQuery,
    forget_cached,
    load_rows,
    ranked_text,
    said_day,
    search_ids,
    speaker_of,
)
from memory.recall_store import RecallRow, RecallStore
from memory.store import Tombstone

logger = logging.getLogger(__name__)

WARM_DAYS = 14  # chats with a message this recent are loaded at start ...
WARM_CHATS = 20  # ... at most this many, busiest first
BATCH = 256  # messages embedded and written at a time
PER_HIT_OVERHEAD = 8  # tokens a recalled line costs beyond its text/4 (date, speaker)
MAX_HIT_CHARS = 600  # a recalled message longer than this is cut in the section
MAX_RECALLED = 150  # messages looked at for the section, at most


@dataclass(frozen=True)
class RecallSources:
    """What the recaller reads beside its own store: the embedder and the tombstones."""

    embedder: Callable[[], Embedder | None]
    tombstones: Callable[[int], list[Tombstone]]
    warm: Callable[[int], Awaitable[int]] | None = None  # the memories' warm-up of a chat


def carries_forgotten(hit: RecallHit, tombstones: Sequence[Tombstone]) -> bool:
    """Whether a message says a forgotten memory: all its words, or its distinctive terms."""
    for tombstone in tombstones:
        forgotten = fact_terms(tombstone.content, tombstone.speaker)
        said = fact_terms(hit.content, hit.speaker)
        if forgotten and forgotten <= said:
            return True
        if repeats_by_terms(hit.content, tombstone):
            return True
    return False


def hit_cost(hit: RecallHit) -> float:
    """Token cost of one recalled line."""
    return min(len(hit.content), MAX_HIT_CHARS) / 4 + PER_HIT_OVERHEAD


def said_line(hit: RecallHit) -> tuple[str, str]:
    """Who said what, case and spacing aside: the same line said again shows once."""
    return hit.speaker.casefold(), " ".join(hit.content.split()).casefold()


def pack_vectors(vectors: Sequence[Sequence[float]]) -> list[bytes | None]:
    return [np.asarray(vector, dtype=np.float32).tobytes() for vector in vectors]


class Recaller:
    def __init__(self, store: RecallStore, sources: RecallSources, zone: ZoneInfo) -> None:
        self.store = store
        self.sources = sources
        self.zone = zone
        self._locks: dict[int, asyncio.Lock] = {}
        self._queue: asyncio.Queue[int] | None = None  # set while a `RecallService` runs
        self._queued: set[int] = set()

    # -- keeping the index current ------------------------------------------------------

    async def catch_up(self, chat_id: int, up_to: int | None = None) -> int:
        """Index the chat's messages not indexed yet (up to id `up_to`); return how many.

        Vectors are made off the event loop; the rows are written on the caller's thread."""
        lock = self._locks.setdefault(chat_id, asyncio.Lock())
        done = 0
        async with lock:
            while rows := self.store.unindexed(chat_id, BATCH, up_to):
                embedder = self.sources.embedder()
                vectors = await asyncio.to_thread(self._vectors, embedder, rows)
                model = embedder.model_name if embedder is not None else ""
                self.store.add(chat_id, rows, vectors, model)
                done += len(rows)
                if len(rows) < BATCH:
                    break
        return done

    def _vectors(self, embedder: Embedder | None, rows: list[RecallRow]) -> list[bytes | None]:
        if embedder is None:
            return [None] * len(rows)
        return pack_vectors(embedder.embed([ranked_text(row, self.zone) for row in rows]))

    def catch_up_later(self, chat_id: int) -> None:
        """Have the chat's new messages indexed in the background, by the `RecallService`
        when one runs (`mnemo run`); without one, compaction and searches catch up."""
        if self._queue is not None and chat_id not in self._queued:
            self._queued.add(chat_id)
            self._queue.put_nowait(chat_id)

    async def serve(self) -> None:
        """Warm up, then index the chats handed to `catch_up_later`, until cancelled."""
        queue: asyncio.Queue[int] = asyncio.Queue()
        self._queue = queue
        try:
            await self.warm_up()
            while True:
                chat_id = await queue.get()
                self._queued.discard(chat_id)
                try:
                    await self.catch_up(chat_id)
                except Exception:  # the job's boundary: the chat's next turn tries again
                    logger.exception("indexing chat %s for recall failed", chat_id)
        finally:
            self._queue = None
            self._queued.clear()

    async def warm_up(self, days: int = WARM_DAYS, chats: int = WARM_CHATS) -> int:
        """Index and load into the process the indexes (recall, and the memories' through
        `RecallSources.warm`) of the chats active in the last `days`, busiest first, so
        their first message after a start does not wait."""
        since = iso_utc(utc_now() - timedelta(days=days))
        warmed = 0
        try:
            for chat_id in self.store.recently_active_chats(since, chats):
                await self.catch_up(chat_id)
                rows = self.store.rows(chat_id)  # read here: the connection stays on one thread
                await asyncio.to_thread(load_rows, self.store, chat_id, rows, self.zone)
                if self.sources.warm is not None:
                    await self.sources.warm(chat_id)
                warmed += 1
        except Exception:  # a background job's boundary: queries build what they need
            logger.exception("warming the recall indexes up failed")
        return warmed

    async def rebuild(self) -> int:
        """Drop the whole index and index every chat's messages again (`mnemo memory
        reindex`: the index is derived from `messages`); return how many."""
        self.store.clear()
        done = 0
        for chat_id in self.store.chats_with_messages():
            forget_cached(self.store, chat_id)
            done += await self.catch_up(chat_id)
        return done

    def forget_chat(self, chat_id: int) -> int:
        """Delete the chat's index (its messages are being deleted)."""
        gone = self.store.forget_chat(chat_id)
        forget_cached(self.store, chat_id)
        return gone

    # -- reading ------------------------------------------------------------------------

    def search(self, chat_id: int, query: RecallQuery) -> list[RecallHit]:
        """The chat's best matching messages, best first, none that says a forgotten fact."""
        embedder = self.sources.embedder()
        scored = search_ids(self.store, chat_id, query, embedder, self.zone)
        rows = {row.message_id: row for row in self.store.by_ids(chat_id, [i for i, _ in scored])}
        tombstones = self.sources.tombstones(chat_id)
        hits: list[RecallHit] = []
        for message_id, score in scored:
            row = rows.get(message_id)
            if row is None:
                continue
            hit = RecallHit(
                message_id,
                speaker_of(row),
                row.content,
                row.said_at,
                said_day(row.said_at, self.zone),
                score,
            )
            wanted = not query.speaker or hit.speaker.casefold() == query.speaker.casefold()
            if wanted and not carries_forgotten(hit, tombstones):
                hits.append(hit)
            if len(hits) >= query.limit:
                break
        return hits

    def recalled(
        self,
        chat_id: int,
        text: str,
        up_to_id: int,
        budget: float,
        today: date | None = None,
        skip: Callable[[RecallHit], bool] | None = None,
        floor: float = 0.0,
    ) -> list[RecallHit]:
        """The best matches for `text` among messages up to `up_to_id` (out of the window)
        that fit `budget` tokens, in time order; none that `skip` refuses, none scored
        below `floor` times the best match's score (0: every match that fits), and a line
        said again word for word once only (its best-ranked saying)."""
        if budget <= 0 or up_to_id <= 0 or not text.strip():
            return []
        limit = max(1, int(budget // PER_HIT_OVERHEAD))
        query = RecallQuery(text, min(limit, MAX_RECALLED), up_to_id=up_to_id, today=today)
        hits = [h for h in self.search(chat_id, query) if skip is None or not skip(h)]
        lowest = floor * max((hit.score for hit in hits), default=0.0)
        chosen: list[RecallHit] = []
        said: set[tuple[str, str]] = set()
        spent = 0.0
        for hit in hits:
            if hit.score < lowest or said_line(hit) in said:
                continue
            if spent + hit_cost(hit) <= budget:
                chosen.append(hit)
                said.add(said_line(hit))
                spent += hit_cost(hit)
        return sorted(chosen, key=lambda hit: hit.message_id)


class RecallService:
    """A `core.api.Service`: keeps the recall index current in the background."""

    name = "recall-index"

    def __init__(self, recaller: Recaller) -> None:
        self.recaller = recaller

    async def run(self) -> None:
        await self.recaller.serve()
