"""Each chat's memory vectors held in process, so ranking reads no vector from the database.

A query scores all of a chat's (and the global) vectors exactly with one matrix product: on
10,000 memories about half a millisecond, where the binary KNN of sqlite-vec plus reading
the candidates' float vectors back took 2-4 ms, and twice that after a pause between
queries (cold pages; `mnemo bench memory --gap`). Changes arrive through the memory change
log (`memory.chat_cache`): a changed memory is masked in the large base segment and kept in
a small recent one; the two merge once the recent one or the masked share grows. The
cache keeps `CACHE_VECTORS` per connection across chats (least recently used go first),
and always the chat in use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memory.chat_cache import Derivation, current
from memory.store import MemoryStore, VectorRows

CACHE_VECTORS = 60_000  # vectors kept per connection, across chats (384 dims: ~90 MB)
RECENT_MIN = 256  # the recent segment merges into the base past this many vectors ...
RECENT_SHARE = 0.05  # ... or past this share of them, whichever is more
MASKED_SHARE = 0.25  # the base is rebuilt when this share of it is masked out


def _matrix(rows: VectorRows) -> tuple[Any, Any]:
    ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
    if not rows:
        return ids, np.zeros((0, 0), np.float32)
    flat = np.frombuffer(b"".join(row[1] for row in rows), dtype=np.float32)
    matrix = flat.reshape(len(rows), -1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return ids, matrix / np.where(norms > 0, norms, 1.0)


@dataclass(frozen=True)
class ChatVectors:
    """Unit vectors of a chat's candidates: a base segment (with a mask) and a recent one."""

    base_ids: Any
    base: Any
    alive: Any
    recent: dict[int, Any] = field(default_factory=dict)

    @classmethod
    def build(cls, rows: VectorRows) -> ChatVectors:
        ids, matrix = _matrix(rows)
        return cls(ids, matrix, np.ones(len(ids), dtype=bool))

    def __len__(self) -> int:
        return int(self.alive.sum()) + len(self.recent)

    def apply(self, rows: VectorRows, removed: Sequence[int]) -> ChatVectors:
        """These vectors with `rows` (new or changed) in and `removed` ids out."""
        changed = [*removed, *(row[0] for row in rows)]
        alive = self.alive & ~np.isin(self.base_ids, np.asarray(changed, dtype=np.int64))
        recent = {k: v for k, v in self.recent.items() if k not in set(changed)}
        new_ids, new_matrix = _matrix(rows)
        recent.update(zip(new_ids.tolist(), new_matrix, strict=True))
        masked = len(alive) - int(alive.sum())
        if len(recent) > max(RECENT_MIN, RECENT_SHARE * len(alive)) or (
            masked > MASKED_SHARE * max(len(alive), 1)
        ):
            return self._merged(alive, recent)
        return ChatVectors(self.base_ids, self.base, alive, recent)

    def _merged(self, alive: Any, recent: dict[int, Any]) -> ChatVectors:
        recent_ids = np.fromiter(recent, np.int64, len(recent))
        ids = np.concatenate([self.base_ids[alive], recent_ids])
        blocks = [self.base[alive].reshape(-1, self.width(recent))]
        if recent:
            blocks.append(np.stack(list(recent.values())))
        matrix = np.concatenate(blocks)
        order = np.argsort(ids, kind="stable")
        return ChatVectors(ids[order], matrix[order], np.ones(len(ids), dtype=bool))

    def width(self, recent: dict[int, Any]) -> int:
        if self.base.size:
            return int(self.base.shape[1])
        return len(next(iter(recent.values()))) if recent else 0

    def search(
        self, query: Sequence[float], k: int, also: Sequence[int] = ()
    ) -> tuple[list[tuple[int, float]], dict[int, float]]:
        """The `k` most similar (id, cosine) best first, exactly, and the similarity of each
        id in `also` that has a vector: one matrix product for both."""
        vector = np.asarray(query, dtype=np.float32)
        vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
        keys = list(self.recent)
        ids = np.concatenate([self.base_ids, np.asarray(keys, dtype=np.int64)])
        sims = np.full(len(ids), -np.inf, dtype=np.float32)
        if len(self.base_ids):
            sims[: len(self.base_ids)] = np.where(self.alive, self.base @ vector, -np.inf)
        if keys:
            sims[len(self.base_ids) :] = np.stack([self.recent[k] for k in keys]) @ vector
        live = int(np.isfinite(sims).sum())
        count = min(k, live)
        top = np.argpartition(-sims, count - 1)[:count] if count else np.zeros(0, np.int64)
        best = top[np.argsort(-sims[top], kind="stable")]
        nearest = list(zip(ids[best].tolist(), sims[best].astype(float).tolist(), strict=True))
        return nearest, self._gather(ids, sims, also)

    def _gather(self, ids: Any, sims: Any, wanted: Sequence[int]) -> dict[int, float]:
        found: dict[int, float] = {}
        base_count = len(self.base_ids)
        recent_at = {key: base_count + i for i, key in enumerate(self.recent)}
        for memory_id in wanted:
            place = recent_at.get(memory_id)
            if place is None and base_count:
                spot = int(np.searchsorted(self.base_ids, memory_id))
                if spot < base_count and self.base_ids[spot] == memory_id:
                    place = spot
            if place is not None and np.isfinite(sims[place]):
                found[memory_id] = float(sims[place])
        return found


def _build(store: MemoryStore, chat_id: int | None, previous: ChatVectors | None) -> ChatVectors:
    return ChatVectors.build(store.vector_rows(chat_id))


def _apply(
    store: MemoryStore, chat_id: int | None, previous: ChatVectors, ids: list[int]
) -> ChatVectors:
    rows = store.vector_rows(chat_id, ids)
    kept = {row[0] for row in rows}
    return previous.apply(rows, [memory_id for memory_id in ids if memory_id not in kept])


CHAT_VECTORS: Derivation[ChatVectors] = Derivation("vectors", _build, _apply, lambda: CACHE_VECTORS)


def chat_vectors(store: MemoryStore, chat_id: int | None) -> ChatVectors:
    """The chat's (and the global) vectors, up to date."""
    return current(store, chat_id, CHAT_VECTORS)
