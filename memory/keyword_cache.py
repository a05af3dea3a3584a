"""Each connection's keyword lists per chat, kept current from the memory change log.

The first query of a chat builds its `PostingLists` from the store; later queries read the
log (triggers of migration m0006, whichever process or connection wrote it) from where the
lists were last brought up to date and re-read only the memories that changed. So a query
after a change costs a small recent-segment rebuild, not a new index. `bm25_ids` and
`jaccard_ids` are what `rank_memories` calls.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

from memory.posting_lists import PostingLists, query_terms
from memory.store import Marks, MemoryStore

CACHE_MEMORIES = 200_000  # memories kept in posting lists per connection, across chats


class _Cache:
    """Per-connection LRU of chats' lists, bounded by the memories they hold in total."""

    def __init__(self) -> None:
        self.entries: OrderedDict[int | None, tuple[Marks, PostingLists]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, chat_id: int | None) -> tuple[Marks, PostingLists] | None:
        with self.lock:
            entry = self.entries.get(chat_id)
            if entry is not None:
                self.entries.move_to_end(chat_id)
            return entry

    def put(self, chat_id: int | None, marks: Marks, lists: PostingLists) -> None:
        with self.lock:
            self.entries[chat_id] = (marks, lists)
            self.entries.move_to_end(chat_id)
            held = sum(len(item) for _, item in self.entries.values())
            while held > CACHE_MEMORIES and len(self.entries) > 1:
                _, (_, dropped) = self.entries.popitem(last=False)
                held -= len(dropped)


_caches: weakref.WeakKeyDictionary[object, _Cache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def keyword_lists(store: MemoryStore, chat_id: int | None) -> PostingLists:
    """The chat's posting lists, brought up to date with the change log.

    Log positions are read before the rows they cover, so a change that lands in between is
    applied again next time (applying a change is idempotent), never missed. Inside an open
    transaction the result is not kept: it may hold writes that are rolled back later.
    """
    with _caches_lock:
        cache = _caches.setdefault(store.cache_key, _Cache())
    entry = cache.get(chat_id)
    changes = store.changes_since(chat_id, entry[0]) if entry is not None else None
    if entry is not None and changes is None:
        return entry[1]
    previous = entry[1] if entry is not None else None
    if previous is None or changes is None or changes.pruned_through:
        end = store.change_log_end()
        marks, lists = Marks(end, end), PostingLists.build(store.ranking_rows(chat_id), previous)
    else:
        ids = sorted(changes.memory_ids)
        rows = store.ranking_rows(chat_id, ids)
        kept = {row[0] for row in rows}
        marks = changes.marks
        lists = previous.apply(rows, [memory_id for memory_id in ids if memory_id not in kept])
    if not store.in_transaction():
        cache.put(chat_id, marks, lists)
    return lists


def bm25_ids(
    store: MemoryStore, chat_id: int | None, query: str, depth: int
) -> list[tuple[int, float]]:
    """(id, BM25 score) of the chat's and global memories matching a query word, best first."""
    terms = query_terms(query)
    if not terms:
        return []
    return keyword_lists(store, chat_id).score(terms, depth)


def jaccard_ids(store: MemoryStore, chat_id: int | None, query: str) -> list[tuple[int, float]]:
    """(id, Jaccard of content-stem sets) of every candidate sharing a stem, best first."""
    terms = query_terms(query)
    if not terms:
        return []
    return keyword_lists(store, chat_id).jaccard(terms)
