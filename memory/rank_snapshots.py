"""Saved ranking data: a chat's keyword posting lists and vectors as one blob each, so a new
process loads them instead of building them from every memory.

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
from memory.keyword_cache import KEYWORD_LISTS, KEYWORDS
from memory.posting_snapshot import lists_arrays
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

Saving = tuple[str, Callable[[Any], dict[str, Any]], str]  # kind, its arrays, its model

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


def checkpoint(
    store: MemoryStore, chat_id: int | None, least: int = CHECKPOINT_CHANGES
) -> list[str]:
    """Save the chat's keyword lists and vectors where the saved ones are missing or behind
    by `least` changed memories (0: always); the kinds saved. Builds what is not held. The
    vectors and their codes (`VECTOR_CODES`) are saved together, in one transaction, so
    both always carry the same marks."""
    groups: list[tuple[Derivation[Any], list[Saving]]] = [
        (KEYWORD_LISTS, [(KEYWORDS, lists_arrays, "")])
    ]
    if store.embedder is not None and store.vectors_unavailable() is None:
        model = vector_model(store)
        pair: list[Saving] = [(VECTORS, vectors_arrays, model), (VECTOR_CODES, codes_arrays, model)]
        groups.append((CHAT_VECTORS, pair))
    saved = []
    for derivation, kinds in groups:
        if least and not any(_behind(store, chat_id, kind, least) for kind, _, _ in kinds):
            continue
        marks, value = current_entry(store, chat_id, derivation)
        blobs = [(kind, pack_arrays(arrays(value)), model) for kind, arrays, model in kinds]
        with store.transaction():
            for kind, blob, model in blobs:
                store.save_rank_snapshot(chat_id, kind, RankSnapshot(marks, model, blob))
        saved += [kind for kind, _, _ in kinds]
    return saved


def checkpoint_held(store: MemoryStore, least: int = CHECKPOINT_CHANGES) -> int:
    """`checkpoint` every chat whose keyword lists this process holds for the store's
    connection (the reflector's upkeep); how many snapshots were saved."""
    return sum(len(checkpoint(store, chat, least)) for chat in held_chats(store, KEYWORD_LISTS))
