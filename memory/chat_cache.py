"""Per-chat data derived from memories, held in process and kept current from the change log.

A derivation (the keyword posting lists, the chat's vectors) is built from the store at a
chat's first query; later queries read the memory change log (triggers of migrations m0006
and m0007, whichever process or connection wrote it) from where the data was last brought up
to date and hand only the changed memories to `apply`. Log positions are read before the
rows they cover, so a change that lands in between is applied again next time (applying a
change is idempotent), never missed. Inside an open transaction the result is not kept: it
may hold writes that are rolled back later. Each connection keeps an LRU per derivation,
bounded by the memories held.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import Generic, TypeVar

from memory.store import Marks, MemoryStore

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
    cache: ChatCache[T] = _cache(store, derivation.name)  # type: ignore[assignment]
    entry = cache.get(chat_id)
    changes = store.changes_since(chat_id, entry[0]) if entry is not None else None
    if entry is not None and changes is None:
        return entry[1]
    previous = entry[1] if entry is not None else None
    if previous is None or changes is None or changes.pruned_through:
        end = store.change_log_end()
        marks, value = Marks(end, end), derivation.build(store, chat_id, previous)
    else:
        marks = changes.marks
        value = derivation.apply(store, chat_id, previous, sorted(changes.memory_ids))
    if not store.in_transaction():
        cache.put(chat_id, marks, value, derivation.budget())
    return value


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
