"""Each chat's memory vectors held in process, so ranking reads no vector from the database.

A query takes the chat's (and the global) nearest vectors by the Hamming distance of their
sign bits, then scores those and every keyword hit it is asked about exactly (float16
vectors, float32 arithmetic). At 90,000 vectors the bit scan costs about 1 ms where one
float32 matrix product over all of them took 6-60 ms (memory bandwidth, and the load of
the machine); recall@10 against that exact scan is measured by `mnemo bench memory`
(0.99+ at 20,000 and 100,000 synthetic memories). Up to `rescore_count(k)` vectors every
vector is scored. Changes arrive through the memory change log (`memory.chat_cache`): a
changed memory is masked in the large base segment and appended to a small recent one
(`memory.recent_vectors`: one block, never re-stacked); the two merge once the recent one or
the masked share grows. A new process loads the base from its
saved snapshot (`memory.rank_snapshots`) instead of reading every vector; on PostgreSQL it
loads the sign codes alone (`VECTOR_CODES`) and reads the float16 rows in the background
(`memory.pending_vectors`), answering meanwhile from the rows it needs. The cache keeps
`CACHE_VECTORS` per connection across chats (least recently used go first), and always
the chat in use.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.ma as _numpy_ma  # noqa: F401  `np.unique` imports it at first use: ~30 ms, at start

from memory.chat_cache import Derivation, current, load_saved
from memory.pending_vectors import PendingBase
from memory.recent_vectors import RecentVectors
from memory.snapshot_arrays import unpack_arrays
from memory.store import Marks, MemoryStore, RankSnapshot, VectorRows

VECTORS = "vectors"  # the kind of their saved snapshots (`memory.rank_snapshots`)
VECTOR_CODES = "vector codes"  # their ids and sign codes alone (read first on PostgreSQL)
CACHE_VECTORS = 60_000  # vectors kept per connection, across chats (384 dims: ~50 MB)
RESCORE_MIN = 200  # nearest binary codes scored exactly, at least ...
RESCORE_FACTOR = 4  # ... and this many per wanted result
SAMPLE_STEP = 64  # `nearest_codes`: the cut is first guessed from every 64th distance
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


def sign_codes(matrix: Any) -> Any:
    """One bit per dimension (set where the value is positive), as 64-bit words: an array
    of shape (words, rows), each word's row contiguous for the Hamming scan."""
    if not matrix.size:
        return np.zeros((0, len(matrix)), np.uint64)
    bits = np.packbits(matrix > 0, axis=1)
    pad = (-bits.shape[1]) % 8
    if pad:
        bits = np.pad(bits, ((0, 0), (0, pad)))
    return np.ascontiguousarray(bits.view(np.uint64).T)


def hamming(codes: Any, query: Any) -> Any:
    """Hamming distance of each column of `codes` to the query's code (one column)."""
    rows = codes.shape[1]
    distance = np.zeros(rows, np.uint16)
    word_bits = np.empty(rows, np.uint64)  # reused: no temporary array per word
    counts = np.empty(rows, np.uint8)
    for word in range(codes.shape[0]):
        np.bitwise_xor(codes[word], query[word, 0], out=word_bits)
        np.bitwise_count(word_bits, out=counts)
        np.add(distance, counts, out=distance)
    return distance


def nearest_codes(distance: Any, count: int) -> Any:
    """Positions of the `count` smallest distances (ties at the cut: the first ones), in
    position order. One pass over all of them keeps those within a guessed bound
    (`_guess`); the cut and the ties are found among those few."""
    if count >= len(distance):
        return np.arange(len(distance))
    if count <= 0:
        return np.zeros(0, np.int64)
    within = np.flatnonzero(distance <= _guess(distance, count))
    if len(within) < count:  # the guess was short: take them all
        within = np.arange(len(distance))
    near = distance[within]
    cut = int(np.partition(near, count - 1)[count - 1])  # the count-th smallest distance
    keep = near < cut
    at_cut = np.flatnonzero(near == cut)
    keep[at_cut[: count - int(np.count_nonzero(keep))]] = True
    return within[keep]


def _guess(distance: Any, count: int) -> int:
    """A distance that about twice `count` of `distance` are within, from a sample of every
    `SAMPLE_STEP`-th one (`nearest_codes` checks it)."""
    sample = distance[::SAMPLE_STEP]
    rank = min(len(sample) - 1, 2 * count // SAMPLE_STEP + 8)
    return int(np.partition(sample, rank)[rank])


def _union(first: Any, second: Any) -> Any:
    """`np.union1d` of two int arrays (sorted, each value once), without its overheads."""
    joined = np.sort(np.concatenate([first, second]))
    if len(joined) < 2:
        return joined
    keep = np.empty(len(joined), bool)
    keep[0] = True
    np.not_equal(joined[1:], joined[:-1], out=keep[1:])
    return joined[keep]


def rescore_count(k: int) -> int:
    """How many nearest binary codes are scored exactly for `k` results."""
    return max(RESCORE_MIN, RESCORE_FACTOR * k)


@dataclass(frozen=True)
class ChatVectors:
    """Unit vectors of a chat's candidates: a base segment (with a mask) and a recent one.

    The base keeps each vector as float16 and as its sign bits (`sign_codes`); a search
    takes the base's `rescore_count(k)` nearest codes by Hamming distance and scores them,
    with the recent ones, exactly (measured recall@10 against an exact float32 scan: see
    `mnemo bench memory`).
    """

    base_ids: Any  # numpy int64, ascending
    base: Any  # numpy float16 (rows, dims): unit vectors
    alive: Any  # numpy bool per base row (False: changed or gone since)
    codes: Any = None  # numpy uint64 (words, rows): the base's sign bits (None: made here)
    recent: RecentVectors = field(default_factory=RecentVectors)  # appended, never re-stacked

    def __post_init__(self) -> None:
        if self.codes is None:
            object.__setattr__(self, "codes", sign_codes(self.base))

    @classmethod
    def build(cls, rows: VectorRows) -> ChatVectors:
        ids, matrix = _matrix(rows)
        order = np.argsort(ids, kind="stable")
        return cls(ids[order], matrix[order].astype(np.float16), np.ones(len(ids), dtype=bool))

    def __len__(self) -> int:
        return int(self.alive.sum()) + len(self.recent)

    def apply(self, rows: VectorRows, removed: Sequence[int]) -> ChatVectors:
        """These vectors with `rows` (new or changed) in and `removed` ids out: the base
        masked, the recent rows appended (`RecentVectors`), nothing re-stacked."""
        changed = [*removed, *(row[0] for row in rows)]
        alive = self.alive.copy()
        alive[self._places(changed)] = False
        new_ids, new_matrix = _matrix(rows)
        recent = self.recent.changed(new_ids, new_matrix, set(changed))
        masked = len(alive) - int(alive.sum())
        if len(recent) > max(RECENT_MIN, RECENT_SHARE * len(alive)) or (
            masked > MASKED_SHARE * max(len(alive), 1)
        ):
            return self.merged(alive, recent)
        return ChatVectors(self.base_ids, self.base, alive, self.codes, recent)

    def merged(self, alive: Any = None, recent: RecentVectors | None = None) -> ChatVectors:
        """One base of the live vectors (these ones' by default), nothing masked. The base
        rows keep their sign codes (a code is its row's alone): only the recent rows' are made."""
        alive = self.alive if alive is None else alive
        recent = self.recent if recent is None else recent
        recent_ids, recent_rows = recent.rows()
        ids = np.concatenate([self.base_ids[alive], recent_ids])
        kept = len(ids) - len(recent_ids)
        width = self.width(recent)
        matrix = np.empty((len(ids), width), np.float16)  # written once
        matrix[:kept] = self.base[alive].reshape(kept, width)
        codes = [self.codes[:, alive]] if len(self.base_ids) else []
        if len(recent_ids):
            matrix[kept:] = recent_rows
            codes.append(sign_codes(matrix[kept:]))
        joined = np.concatenate(codes, axis=1) if codes else None
        if len(ids) > 1 and not bool((ids[1:] > ids[:-1]).all()):  # new ids are usually larger
            order = np.argsort(ids, kind="stable")
            ids, matrix = ids[order], matrix[order]
            joined = None if joined is None else np.ascontiguousarray(joined[:, order])
        return ChatVectors(ids, matrix, np.ones(len(ids), dtype=bool), joined)

    def width(self, recent: RecentVectors | None = None) -> int:
        """The vectors' dimensions (0: none held); `recent`: those to ask instead of the
        vectors' own recent ones."""
        if self.base.size:
            return int(self.base.shape[1])
        return (self.recent if recent is None else recent).width

    def _candidates(self, query: Any, k: int) -> Any:
        """Base positions to score exactly: all live ones, or the nearest live codes."""
        count = rescore_count(k)
        if len(self.base_ids) <= count:
            return np.flatnonzero(self.alive)
        distance = hamming(self.codes, sign_codes(query[None, :]))
        bits = 64 * len(self.codes)
        if not self.alive.all():
            distance[~self.alive] = bits + 1  # past any real distance
        nearest = nearest_codes(distance, count)
        return nearest[self.alive[nearest]]

    def search(
        self, query: Sequence[float], k: int, also: Sequence[int] = ()
    ) -> tuple[list[tuple[int, float]], dict[int, float]]:
        """The `k` most similar (id, cosine) best first, and the similarity of each id in
        `also` that has a vector."""
        vector = np.asarray(query, dtype=np.float32)
        vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
        places = self._candidates(vector, k) if len(self.base_ids) else np.zeros(0, np.int64)
        wanted = self._places(also)
        places = _union(places, wanted) if len(wanted) else places
        keys, recent = self.recent.similarities(vector)
        ids = np.concatenate([self.base_ids[places], keys])
        sims = np.concatenate(
            [
                self.base[places].astype(np.float32) @ vector
                if len(places)
                else np.zeros(0, np.float32),
                recent,
            ]
        )
        count = min(k, len(ids))
        top = np.argpartition(-sims, count - 1)[:count] if count else np.zeros(0, np.int64)
        best = top[np.argsort(-sims[top], kind="stable")]
        nearest = list(zip(ids[best].tolist(), sims[best].astype(float).tolist(), strict=True))
        found = dict(zip(ids.tolist(), sims.astype(float).tolist(), strict=True))
        return nearest, {memory_id: found[memory_id] for memory_id in also if memory_id in found}

    def _places(self, memory_ids: Sequence[int]) -> Any:
        """Base positions of the live ones among `memory_ids` that are not recent ones."""
        if not len(memory_ids) or not len(self.base_ids):
            return np.zeros(0, np.int64)
        asked = np.asarray(memory_ids, dtype=np.int64)
        if len(self.recent):
            asked = asked[~self.recent.holds(asked)]
        spots = np.minimum(np.searchsorted(self.base_ids, asked), len(self.base_ids) - 1)
        spots = spots[self.base_ids[spots] == asked]
        return spots[self.alive[spots]]


def _build(store: MemoryStore, chat_id: int | None, previous: ChatVectors | None) -> ChatVectors:
    return ChatVectors.build(store.vector_rows(chat_id))


def _apply(
    store: MemoryStore, chat_id: int | None, previous: ChatVectors, ids: list[int]
) -> ChatVectors:
    rows = store.vector_rows(chat_id, ids)
    kept = {row[0] for row in rows}
    return previous.apply(rows, [memory_id for memory_id in ids if memory_id not in kept])


def vectors_arrays(vectors: ChatVectors) -> dict[str, Any]:
    """The vectors as arrays to save (one base, nothing masked)."""
    merged = vectors.merged() if len(vectors.recent) or not vectors.alive.all() else vectors
    return {"ids": merged.base_ids, "base": merged.base, "codes": merged.codes}


def codes_arrays(arrays: dict[str, Any]) -> dict[str, Any]:
    """The ids and sign codes of `vectors_arrays`' output, and the vectors' width: what is
    saved as `VECTOR_CODES`."""
    dims = np.asarray(arrays["base"].shape[1])
    return {"ids": arrays["ids"], "codes": arrays["codes"], "dims": dims}


def vectors_from_arrays(arrays: dict[str, Any]) -> ChatVectors:
    ids = arrays["ids"]
    return ChatVectors(ids, arrays["base"], np.ones(len(ids), bool), arrays["codes"])


def _rows_of(store: MemoryStore, chat_id: int | None, ids: Any, dims: int) -> Any:
    """The float16 unit vectors of `ids` (ascending) as a build makes them; zeros for a
    memory the store no longer ranks."""
    found, matrix = _matrix(store.vector_rows(chat_id, ids.tolist()))
    rows = np.zeros((len(ids), dims), np.float16)
    if len(found):
        at = np.minimum(np.searchsorted(found, ids), len(found) - 1)
        hit = found[at] == ids
        rows[hit] = matrix[at[hit]]
    return rows


def _block_later(store: MemoryStore, chat_id: int | None, marks: Marks, ids: Any) -> Future[Any]:
    """The float16 block of the saved vectors, read on another connection; None when the
    one saved is not the one the codes came with."""
    model, block = vector_model(store), Future[Any]()

    def arrived(read: Future[RankSnapshot | None]) -> None:
        try:
            snapshot = read.result()
            arrays = None
            if snapshot is not None and (snapshot.marks, snapshot.model) == (marks, model):
                arrays = unpack_arrays(snapshot.data)
            same = arrays is not None and np.array_equal(arrays["ids"], ids)
            block.set_result(arrays["base"] if same and arrays is not None else None)
        except BaseException as exc:  # handed to the reader of the block
            block.set_exception(exc)

    store.rank_snapshot_later(chat_id, VECTORS).add_done_callback(arrived)
    return block


def _pending(
    store: MemoryStore, chat_id: int | None, marks: Marks, arrays: dict[str, Any]
) -> ChatVectors:
    ids, dims = arrays["ids"], int(arrays["dims"])
    base = PendingBase(
        ids,
        dims,
        lambda wanted: _rows_of(store, chat_id, wanted, dims),
        lambda: _block_later(store, chat_id, marks, ids),
    )
    return ChatVectors(ids, base, np.ones(len(ids), bool), arrays["codes"])


def vector_model(store: MemoryStore) -> str:
    """What saved vectors must have been made with: the embedding model and its size."""
    embedder = store.embedder
    return "" if embedder is None else f"{embedder.model_name}/{embedder.dim}"


def _load(store: MemoryStore, chat_id: int | None) -> tuple[Marks, ChatVectors] | None:
    if store.embedder is None:
        return None
    if store.background_reads():  # the codes now, the float16 rows in the background
        codes = load_saved(store, chat_id, VECTOR_CODES, vector_model(store), dict)
        if codes is not None:
            return codes[0], _pending(store, chat_id, *codes)
    return load_saved(store, chat_id, VECTORS, vector_model(store), vectors_from_arrays)


CHAT_VECTORS: Derivation[ChatVectors] = Derivation(
    "vectors", _build, _apply, lambda: CACHE_VECTORS, _load
)


def chat_vectors(store: MemoryStore, chat_id: int | None) -> ChatVectors:
    """The chat's (and the global) vectors, up to date."""
    return current(store, chat_id, CHAT_VECTORS)


def vectors_loaded(vectors: ChatVectors) -> ChatVectors:
    """`vectors` once their float16 rows are all in process (waits for a pending block)."""
    if isinstance(vectors.base, PendingBase):
        vectors.base.block()
    return vectors
