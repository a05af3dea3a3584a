"""Per-chat data derived from memories, held in process and kept current from the change log.

A derivation (the keyword posting lists, the chat's vectors) is loaded from its saved
snapshot at a chat's first query in a process (`memory.rank_snapshots`), or built from the
store when there is none; later queries read the memory change log (triggers of migrations m0006
and m0007, whichever process or connection wrote it) from where the data was last brought up
to date and hand only the changed memories to `apply`. Log positions are read before the
rows they cover, so a change that lands in between is applied again next time (applying a
change is idempotent), never missed. Inside an open transaction the result is not kept: it
may hold writes that are rolled back later. Each connection keeps an LRU per derivation,
bounded by the memories held.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sized
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from memory.snapshot_arrays import unpack_arrays
from memory.store import Changes, Marks, MemoryStore

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=Sized)


class ChatCache(Generic[T]):
    """An LRU of chats' derived data, bounded by the memories they hold in total."""

    def __init__(self) -> None:
        self.entries: OrderedDict[int | None, tuple[Marks, T]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, chat_id: int | None) -> tuple[Marks, T] | None:
        with self.lock:
            entry = self.entries.get(chat_id)
            if entry is not None:
                self.entries.move_to_end(chat_id)
            return entry

    def put(self, chat_id: int | None, marks: Marks, value: T, budget: int) -> None:
        with self.lock:
            self.entries[chat_id] = (marks, value)
            self.entries.move_to_end(chat_id)
            held = sum(len(item) for _, item in self.entries.values())
            while held > budget and len(self.entries) > 1:
                _, (_, dropped) = self.entries.popitem(last=False)
                held -= len(dropped)


@dataclass(frozen=True)
class Derivation(Generic[T]):
    """How to make one kind of per-chat data: from scratch, or by applying changed ids."""

    name: str
    build: Callable[[MemoryStore, int | None, T | None], T]
    apply: Callable[[MemoryStore, int | None, T, list[int]], T]
    budget: Callable[[], int]  # memories held per connection (read at each use)
    # A saved snapshot and the marks it is current to (`memory.rank_snapshots`), or None.
    load: Callable[[MemoryStore, int | None], tuple[Marks, T] | None] | None = None


_caches: weakref.WeakKeyDictionary[object, dict[str, ChatCache[Sized]]] = (
    weakref.WeakKeyDictionary()
)
_caches_lock = threading.Lock()


def _cache(store: MemoryStore, name: str) -> ChatCache[Sized]:
    with _caches_lock:
        per_connection = _caches.setdefault(store.cache_key, {})
        return per_connection.setdefault(name, ChatCache())


def current(store: MemoryStore, chat_id: int | None, derivation: Derivation[T]) -> T:
    """The chat's derived data, brought up to date with the change log."""
    return current_entry(store, chat_id, derivation)[1]


def current_entry(
    store: MemoryStore, chat_id: int | None, derivation: Derivation[T]
) -> tuple[Marks, T]:
    """The chat's derived data, up to date, and the change-log marks it is current to."""
    cache: ChatCache[T] = _cache(store, derivation.name)  # type: ignore[assignment]
    entry = cache.get(chat_id)
    loaded = entry is None and derivation.load is not None
    if loaded and derivation.load is not None:
        entry = derivation.load(store, chat_id)
    changes = _changes_since(store, chat_id, entry[0]) if entry is not None else None
    if entry is not None and changes is None:
        if loaded and not store.in_transaction():
            cache.put(chat_id, entry[0], entry[1], derivation.budget())
        return entry
    previous = entry[1] if entry is not None else None
    if previous is None or changes is None or changes.pruned_through:
        end = store.change_log_end()
        marks, value = Marks(end, end), derivation.build(store, chat_id, previous)
    else:
        marks = changes.marks
        value = derivation.apply(store, chat_id, previous, sorted(changes.memory_ids))
    if not store.in_transaction():
        cache.put(chat_id, marks, value, derivation.budget())
    return marks, value


_shared_reads: ContextVar[dict[tuple[int, int | None, Marks], Changes | None] | None] = ContextVar(
    "memory_change_reads", default=None
)


@contextmanager
def one_change_read() -> Iterator[None]:
    """Inside: the chat's derivations brought up to date from the same marks share one read
    of the change log. A ranking brings the keyword lists and the vectors up to date, and
    they are current to the same marks: one statement (a round trip on PostgreSQL) where
    there were two, and both sides of the ranking see the same changes."""
    token = _shared_reads.set({})
    try:
        yield
    finally:
        _shared_reads.reset(token)


def _changes_since(store: MemoryStore, chat_id: int | None, marks: Marks) -> Changes | None:
    reads = _shared_reads.get()
    if reads is None:
        return store.changes_since(chat_id, marks)
    key = (id(store), chat_id, marks)  # the store lives as long as the `with` block
    if key not in reads:
        reads[key] = store.changes_since(chat_id, marks)
    return reads[key]


def put_current(
    store: MemoryStore, chat_id: int | None, derivation: Derivation[T], marks: Marks, value: T
) -> None:
    """Keep `value`, built elsewhere (a warm-up), as the chat's data up to `marks`."""
    if not store.in_transaction():
        cache: ChatCache[T] = _cache(store, derivation.name)  # type: ignore[assignment]
        cache.put(chat_id, marks, value, derivation.budget())


def is_cached(store: MemoryStore, chat_id: int | None, derivation: Derivation[T]) -> bool:
    """Whether this process holds the chat's data (`/context` and tests ask; a read)."""
    return _cache(store, derivation.name).get(chat_id) is not None


def held_chats(store: MemoryStore, derivation: Derivation[T]) -> list[int | None]:
    """The chats whose data this process holds for the store's connection."""
    cache = _cache(store, derivation.name)
    with cache.lock:
        return list(cache.entries)


# -- saved snapshots (`memory.rank_snapshots`): numpy arrays in one blob (`memory.snapshot_arrays`)


def load_saved(
    store: MemoryStore,
    chat_id: int | None,
    kind: str,
    model: str,
    unpack: Callable[[dict[str, Any]], T],
) -> tuple[Marks, T] | None:
    """The chat's saved data of `kind` made with `model` and the marks it is current to;
    None when there is none, or it cannot be read (logged: it is built instead)."""
    snapshot = store.rank_snapshot(chat_id, kind)
    if snapshot is None or snapshot.model != model:
        return None
    try:
        arrays = unpack_arrays(snapshot.data)
        value = None if arrays is None else unpack(arrays)
    except (ValueError, KeyError, OSError, UnicodeDecodeError) as exc:
        logger.warning("the saved %s of chat %s are unreadable (%s): building them", kind,
                       chat_id, exc)  # fmt: skip
        return None
    return None if value is None else (snapshot.marks, value)
