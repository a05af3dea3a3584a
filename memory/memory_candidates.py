"""`MemoryCandidates`: what the second stage (`memory.second_stage`) reads of ranked
memories: their rows (read once per ranking, for the candidates only), their day and
speaker, and their neighbours in the chat (read on demand, for the few best only).

A memory's day is the date its text starts with (`[8 May 2023] …`, how dated memories are
written) or else the day it was stored; its speaker the `Name:` its text starts with.
"""

from __future__ import annotations

from datetime import date

from memory.second_stage import leading_speaker, split_day
from memory.store import Memory, MemoryStore


def stored_day(stamp: str) -> date | None:
    try:
        return date.fromisoformat(stamp[:10])
    except ValueError:
        return None


def memory_day(memory: Memory) -> date | None:
    """The date a memory's text starts with, else the day it was stored."""
    day, _ = split_day(memory.content)
    return day if day is not None else stored_day(memory.created_at)


class MemoryCandidates:
    """The `memory.second_stage.Candidates` of one ranking of a chat's memories."""

    def __init__(self, store: MemoryStore, chat_id: int | None, rows: dict[int, Memory]) -> None:
        self.store = store
        self.chat_id = chat_id
        self.rows = rows

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
        day = memory_day(memory)
        found: list[int] = []
        for near in self.store.adjacent(self.chat_id, item):
            self.rows.setdefault(near.id, near)
            if memory_day(near) == day:
                found.append(near.id)
        return found
