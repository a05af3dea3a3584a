"""Warm-up at start: a chat's in-process ranking data (the memories' keyword lists and
vectors, `memory.keyword_cache` / `memory.vector_cache`) built before its first message.

The rows are read on the caller's thread (the connection is never used from two threads);
only the building, the CPU part, runs in a worker thread. The change-log position is read
before the rows, as `memory.chat_cache.current` does, so a change landing in between is
applied again at the first query, never missed.
"""

from __future__ import annotations

import asyncio

from memory.chat_cache import put_current
from memory.keyword_cache import KEYWORD_LISTS
from memory.posting_lists import PostingLists
from memory.store import Marks, MemoryStore
from memory.vector_cache import CHAT_VECTORS, ChatVectors


async def warm_memories(store: MemoryStore, chat_id: int) -> int:
    """Build and keep the chat's keyword lists and vectors; return how many memories."""
    end = store.change_log_end()
    marks = Marks(end, end)
    rows = store.ranking_rows(chat_id)
    lists = await asyncio.to_thread(PostingLists.build, rows)
    put_current(store, chat_id, KEYWORD_LISTS, marks, lists)
    if store.vectors_unavailable() is None:
        vectors = store.vector_rows(chat_id)
        built = await asyncio.to_thread(ChatVectors.build, vectors)
        put_current(store, chat_id, CHAT_VECTORS, marks, built)
    return len(lists)
