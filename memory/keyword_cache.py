"""Each chat's keyword posting lists, kept current from the memory change log
(`memory.chat_cache`): a query after a change costs a rebuild of the small recent segment
(at most `posting_lists.NEWEST_MAX` memories), not a new index; a new process loads them
from their saved snapshot (`memory.rank_snapshots`). `bm25_ids` and `jaccard_ids` are what
`rank_memories` calls.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from memory.chat_cache import Derivation, current, load_saved
from memory.posting_lists import PostingLists, query_terms
from memory.posting_snapshot import DeferredRows, lists_from_arrays, saved_docs
from memory.snapshot_arrays import unpack_arrays
from memory.store import Marks, MemoryStore

logger = logging.getLogger(__name__)

CACHE_MEMORIES = 200_000  # memories kept in posting lists per connection, across chats
KEYWORDS = "keywords"  # the kind of their saved snapshots (`memory.rank_snapshots`)
KEYWORD_DOCS = "keyword docs"  # each memory's term numbers, saved apart (`memory.posting_snapshot`)


def _build(store: MemoryStore, chat_id: int | None, previous: PostingLists | None) -> PostingLists:
    if previous is not None:
        read_docs(store, chat_id, previous)
    return PostingLists.build(store.ranking_rows(chat_id), previous)


def _apply(
    store: MemoryStore, chat_id: int | None, previous: PostingLists, ids: list[int]
) -> PostingLists:
    read_docs(store, chat_id, previous)
    rows = store.ranking_rows(chat_id, ids)
    kept = {row[0] for row in rows}
    return previous.apply(rows, [memory_id for memory_id in ids if memory_id not in kept])


def read_docs(store: MemoryStore, chat_id: int | None, lists: PostingLists) -> PostingLists:
    """`lists` with their memories' term numbers read if they were loaded without them
    (`KEYWORD_DOCS`), taken only from the snapshot saved with them (the same marks)."""
    rows = lists.base.rows
    if isinstance(rows, DeferredRows) and not rows.loaded:

        def docs() -> dict[str, Any] | None:
            saved = store.rank_snapshot(chat_id, KEYWORD_DOCS)
            if saved is None or saved.marks != rows.marks:
                return None
            try:
                return saved_docs(unpack_arrays(saved.data))
            except (ValueError, KeyError) as exc:
                logger.warning("the saved keyword docs of chat %s are unreadable (%s)", chat_id,
                               exc)  # fmt: skip
                return None

        rows.read(docs, partial(store.ranking_rows, chat_id))
    return lists


def _load(store: MemoryStore, chat_id: int | None) -> tuple[Marks, PostingLists] | None:
    """The saved lists; their memories' term numbers are read at the first change."""
    found = load_saved(store, chat_id, KEYWORDS, "", lists_from_arrays)
    if found is not None and isinstance(found[1].base.rows, DeferredRows):
        found[1].base.rows.marks = found[0]
    return found


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
