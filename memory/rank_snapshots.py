"""Saved ranking data: a chat's keyword posting lists and vectors, so a new process loads them
instead of building them from every memory. Four blobs a chat, saved in pairs: the lists
(`KEYWORDS`) and their memories' term numbers (`KEYWORD_DOCS`, read at the first change
only); the vectors (`VECTORS`) and their ids and sign codes alone (`VECTOR_CODES`, what a
first query on PostgreSQL reads, `memory.pending_vectors`).

Each blob (numpy arrays, `memory.snapshot_arrays`) is saved with the change-log marks it is
current to (`memory_rank_snapshots`, migration m0023). At a chat's first query in a process
`memory.chat_cache` loads it and applies only the memories logged as changed since, as it
does between queries; the structures then grow by appending (a recent segment) as before.
Measured with `mnemo bench memory --n 100000`: see docs/benchmarks.md.

A snapshot is saved (`checkpoint`) when none is saved or the saved one is behind by
`CHECKPOINT_CHANGES` changed memories: by the warm-up at start (`memory.warm_up`) and by
the reflector's upkeep for the chats this process holds (`checkpoint_held`). Never while
ranking: a query only reads. Forgetting a memory drops the snapshots that held it
(`MemoryStore.forget`), `mnemo memory reindex` drops them all; the next checkpoint saves
them again without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memory.chat_cache import Derivation, current_entry, held_chats
from memory.keyword_cache import KEYWORD_DOCS, KEYWORD_LISTS, KEYWORDS, read_docs
from memory.posting_snapshot import lists_arrays, split_arrays
from memory.snapshot_arrays import pack_arrays
from memory.store import MemoryStore, RankSnapshot
from memory.vector_cache import (
    CHAT_VECTORS,
    VECTOR_CODES,
    VECTORS,
    codes_arrays,
    vector_model,
    vectors_arrays,
)

Arrays = dict[str, dict[str, Any]]  # each kind's arrays
Snapshots = Callable[[MemoryStore, int | None, Any], Arrays]  # from the data held

CHECKPOINT_CHANGES = 500  # a saved snapshot behind by this many changed memories is renewed


def _behind(store: MemoryStore, chat_id: int | None, kind: str, least: int) -> bool:
    """Whether the saved snapshot is missing or `least`+ changed memories behind."""
    marks = store.rank_snapshot_marks(chat_id, kind)
    if marks is None:
        return True
    changes = store.changes_since(chat_id, marks)
    if changes is None:
        return False
    return bool(changes.pruned_through) or len(changes.memory_ids) >= least


def _keyword_snapshots(store: MemoryStore, chat_id: int | None, lists: Any) -> Arrays:
    scoring, docs = split_arrays(lists_arrays(read_docs(store, chat_id, lists)))
    return {KEYWORDS: scoring, KEYWORD_DOCS: docs}


def _vector_snapshots(store: MemoryStore, chat_id: int | None, vectors: Any) -> Arrays:
    arrays = vectors_arrays(vectors)
    return {VECTORS: arrays, VECTOR_CODES: codes_arrays(arrays)}


def checkpoint(
    store: MemoryStore, chat_id: int | None, least: int = CHECKPOINT_CHANGES
) -> list[str]:
    """Save the chat's keyword lists and vectors where the saved ones are missing or behind
    by `least` changed memories (0: always); the kinds saved. Builds what is not held. The
    kinds of one derivation (the lists and their docs, the vectors and their codes) are
    saved together, in one transaction, so they always carry the same marks."""
    groups: list[tuple[Derivation[Any], tuple[str, ...], str, Snapshots]] = [
        (KEYWORD_LISTS, (KEYWORDS, KEYWORD_DOCS), "", _keyword_snapshots)
    ]
    if store.embedder is not None and store.vectors_unavailable() is None:
        pair = (VECTORS, VECTOR_CODES)
        groups.append((CHAT_VECTORS, pair, vector_model(store), _vector_snapshots))
    saved: list[str] = []
    for derivation, kinds, model, snapshots in groups:
        if least and not any(_behind(store, chat_id, kind, least) for kind in kinds):
            continue
        marks, value = current_entry(store, chat_id, derivation)
        made = snapshots(store, chat_id, value)
        blobs = {kind: pack_arrays(arrays) for kind, arrays in made.items()}
        with store.transaction():
            for kind, blob in blobs.items():
                store.save_rank_snapshot(chat_id, kind, RankSnapshot(marks, model, blob))
        saved += list(blobs)
    return saved


def checkpoint_held(store: MemoryStore, least: int = CHECKPOINT_CHANGES) -> int:
    """`checkpoint` every chat whose keyword lists this process holds for the store's
    connection (the reflector's upkeep); how many snapshots were saved."""
    return sum(len(checkpoint(store, chat, least)) for chat in held_chats(store, KEYWORD_LISTS))
