"""`MemoryCandidates`: what the second stage (`memory.second_stage`) reads of ranked
memories: their rows (read once per ranking, for the candidates only), their day and
speaker, and their neighbours in the chat (read on demand, for the few best only).

The candidates' rows are `RankText`s (chat, text, day stored: `MemoryStore.rank_texts`);
neighbours come as whole `Memory` rows. A memory's day is the date its text starts with
(`[8 May 2023] …`, how dated memories are written) or else the day it was stored; its
speaker the `Name:` its text starts with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date

from memory.second_stage import leading_speaker, split_day
from memory.store import Memory, MemoryStore, RankText, RankTexts

Candidate = RankText | Memory  # both have id, chat_id, content and created_at

NEIGHBOUR_PREFETCH = 9  # with the item asked: the best ten candidates' neighbours in one read
# Read with the candidates' rows (`MemoryCandidates.read`): the neighbours of the first
# stage's best; the neighbour step's few best after re-scoring are nearly always among them.
NEIGHBOURS_WITH_ROWS = 12


def stored_day(stamp: str) -> date | None:
    try:
        return date.fromisoformat(stamp[:10])
    except ValueError:
        return None


def memory_day(memory: Candidate) -> date | None:
    """The date a memory's text starts with, else the day it was stored."""
    day, _ = split_day(memory.content)
    return day if day is not None else stored_day(memory.created_at)


class MemoryCandidates:
    """The `memory.second_stage.Candidates` of one ranking of a chat's memories.

    `rows`: the candidates' rows, best first (`MemoryStore.rank_texts` keeps the order asked).
    The first item asked for its neighbours has them read together with those of the next
    best `NEIGHBOUR_PREFETCH` of the chat's own candidates, in one read: the neighbour step
    asks for the few best (after the other steps re-scored them), so one read usually
    serves them all, where one read each was a round trip each on PostgreSQL.
    """

    def __init__(self, store: MemoryStore, chat_id: int | None, rows: dict[int, Candidate]) -> None:
        self.store = store
        self.chat_id = chat_id
        self.rows = rows
        self._near: dict[int, Sequence[Candidate]] = {}  # read ahead, by the item they surround

    @classmethod
    def read(
        cls,
        store: MemoryStore,
        chat_id: int | None,
        ids: Sequence[int],
        known: Mapping[int, Candidate] | None = None,
    ) -> MemoryCandidates:
        """The candidates `ids` (best first; `known`: rows already read) with the neighbours
        of the first `NEIGHBOURS_WITH_ROWS` of them, in one read (one round trip on
        PostgreSQL)."""
        known = known or {}
        missing = [item for item in ids if item not in known]
        seeds = list(ids[:NEIGHBOURS_WITH_ROWS]) if chat_id is not None else []
        near: dict[int, RankTexts] = {}
        if chat_id is None:
            read = store.rank_texts(missing)
        else:
            read, near = store.rank_texts_around(chat_id, missing, seeds)
        rows: dict[int, Candidate] = {}
        for item in ids:
            row = known.get(item) or read.get(item)
            if row is not None:
                rows[item] = row
        candidates = cls(store, chat_id, rows)
        candidates._near.update((seed, near.get(seed, [])) for seed in seeds)
        return candidates

    def text(self, item: int) -> str:
        memory = self.rows.get(item)
        return split_day(memory.content)[1] if memory is not None else ""

    def day(self, item: int) -> date | None:
        memory = self.rows.get(item)
        return memory_day(memory) if memory is not None else None

    def speaker(self, item: int) -> str:
        memory = self.rows.get(item)
        return leading_speaker(memory.content) if memory is not None else ""

    def neighbours(self, item: int) -> list[int]:
        """The chat's own memories stored just before and after `item`, on its day."""
        memory = self.rows.get(item)
        if memory is None or self.chat_id is None or memory.chat_id != self.chat_id:
            return []
        if item not in self._near:
            self._read_neighbours(self.chat_id, item)
        day = memory_day(memory)
        found: list[int] = []
        for near in self._near[item]:
            self.rows.setdefault(near.id, near)
            if memory_day(near) == day:
                found.append(near.id)
        return found

    def _read_neighbours(self, chat_id: int, item: int) -> None:
        """The neighbours of `item` and of the best of the chat's own candidates not read yet."""
        ahead = [
            memory_id
            for memory_id, memory in self.rows.items()
            if memory.chat_id == chat_id and memory_id not in self._near and memory_id != item
        ][:NEIGHBOUR_PREFETCH]
        wanted = [item, *ahead]
        _, found = self.store.rank_texts_around(chat_id, [], wanted)
        for memory_id in wanted:
            self._near[memory_id] = found.get(memory_id, [])
