"""Warm-up at start: a chat's in-process ranking data (the memories' keyword lists and
vectors, `memory.keyword_cache` / `memory.vector_cache`) made ready before its first message,
and saved for the next start where the saved copy is missing or behind
(`memory.rank_snapshots`).

With a saved snapshot the data is loaded (fast) and brought up to date from the change log.
Without one, the rows are read on the caller's thread (the connection is never used from two
threads) and only the building, the CPU part, runs in a worker thread. The change-log
position is read before the rows, as `memory.chat_cache.current` does, so a change landing
in between is applied again at the first query, never missed.
"""

from __future__ import annotations

import asyncio

from memory.chat_cache import put_current
from memory.keyword_cache import KEYWORD_LISTS, KEYWORDS, keyword_lists
from memory.posting_lists import PostingLists
from memory.rank_snapshots import checkpoint
from memory.store import Marks, MemoryStore
from memory.vector_cache import CHAT_VECTORS, VECTORS, ChatVectors, chat_vectors, vectors_loaded


async def warm_memories(store: MemoryStore, chat_id: int) -> int:
    """Make ready and keep the chat's keyword lists and vectors, and save them where the
    saved ones are missing or behind; return how many memories."""
    end = store.change_log_end()
    marks = Marks(end, end)
    vectors = store.vectors_unavailable() is None
    if store.rank_snapshot_marks(chat_id, KEYWORDS) is None:
        rows = store.ranking_rows(chat_id)
        lists = await asyncio.to_thread(PostingLists.build, rows)
        put_current(store, chat_id, KEYWORD_LISTS, marks, lists)
    if vectors and store.rank_snapshot_marks(chat_id, VECTORS) is None:
        built = await asyncio.to_thread(ChatVectors.build, store.vector_rows(chat_id))
        put_current(store, chat_id, CHAT_VECTORS, marks, built)
    count = len(keyword_lists(store, chat_id))
    if vectors:  # on PostgreSQL the float16 rows arrive in the background: waited for here
        await asyncio.to_thread(vectors_loaded, chat_vectors(store, chat_id))
    checkpoint(store, chat_id)
    return count
