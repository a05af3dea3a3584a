"""Each chat's keyword posting lists, kept current from the memory change log
(`memory.chat_cache`): a query after a change costs a small recent-segment rebuild, not a
new index; a new process loads them from their saved snapshot (`memory.rank_snapshots`).
`bm25_ids` and `jaccard_ids` are what `rank_memories` calls.
"""

from __future__ import annotations

from memory.chat_cache import Derivation, current, load_saved
from memory.posting_lists import PostingLists, query_terms
from memory.posting_snapshot import lists_from_arrays
from memory.store import Marks, MemoryStore

CACHE_MEMORIES = 200_000  # memories kept in posting lists per connection, across chats
KEYWORDS = "keywords"  # the kind of their saved snapshots (`memory.rank_snapshots`)


def _build(store: MemoryStore, chat_id: int | None, previous: PostingLists | None) -> PostingLists:
    return PostingLists.build(store.ranking_rows(chat_id), previous)


def _apply(
    store: MemoryStore, chat_id: int | None, previous: PostingLists, ids: list[int]
) -> PostingLists:
    rows = store.ranking_rows(chat_id, ids)
    kept = {row[0] for row in rows}
    return previous.apply(rows, [memory_id for memory_id in ids if memory_id not in kept])


def _load(store: MemoryStore, chat_id: int | None) -> tuple[Marks, PostingLists] | None:
    return load_saved(store, chat_id, KEYWORDS, "", lists_from_arrays)


KEYWORD_LISTS: Derivation[PostingLists] = Derivation(
    "keyword lists", _build, _apply, lambda: CACHE_MEMORIES, _load
)


def keyword_lists(store: MemoryStore, chat_id: int | None) -> PostingLists:
    """The chat's posting lists (its own and global memories), up to date."""
    return current(store, chat_id, KEYWORD_LISTS)


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
