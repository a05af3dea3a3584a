"""The recent part of a chat's vectors (`memory.vector_cache.ChatVectors`): float32 unit
vectors appended to one preallocated block that the versions grown from one another share,
so a change copies none of the rows already held and a search scores them in place.

A version sees the block's first `count` rows and masks the ones changed or gone since they
were appended. Only the newest version of a block appends in place (past every row an older
version reads); any other one (a change applied twice to the same version, as inside a
transaction) copies its live rows into a new block first, so no version ever sees a row
change under it.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from memory.row_products import row_products

BLOCK_MIN = 64  # rows of a new block, at least; it doubles as it fills


class Block:
    """Ids and rows appended in place; `filled` of them written so far."""

    def __init__(self, capacity: int, dims: int) -> None:
        self.ids = np.zeros(capacity, np.int64)
        self.rows = np.zeros((capacity, dims), np.float32)
        self.filled = 0
        self.lock = threading.Lock()

    def claim(self, count: int, ids: Any, matrix: Any) -> bool:
        """Write `ids` and `matrix` after row `count` if that is where the block ends and
        they fit (and have its width); whether they were written."""
        with self.lock:
            end = count + len(ids)
            if self.filled != count or end > len(self.ids) or matrix.shape[1] != self.width:
                return False
            self.ids[count:end] = ids
            self.rows[count:end] = matrix
            self.filled = end
            return True

    @property
    def width(self) -> int:
        return int(self.rows.shape[1])


@dataclass(frozen=True)
class RecentVectors(Mapping[int, Any]):
    """The recent vectors of one `ChatVectors` version: id -> float32 unit vector."""

    block: Block | None = None
    count: int = 0  # rows of the block this version reads
    alive: Any = None  # numpy bool per row read (None: all live)
    live: int = 0

    def changed(self, ids: Any, matrix: Any, gone: Collection[int]) -> RecentVectors:
        """These vectors with the rows of `gone` masked and `ids` (`matrix`) appended."""
        alive = np.ones(self.count, bool) if self.alive is None else self.alive.copy()
        if gone and self.block is not None and self.count:
            asked = np.sort(np.fromiter(gone, np.int64, len(gone)))
            alive &= ~_among(self.block.ids[: self.count], asked)
        if not len(ids):
            return RecentVectors(self.block, self.count, alive, int(alive.sum()))
        if self.block is not None and self.block.claim(self.count, ids, matrix):
            alive = np.concatenate([alive, np.ones(len(ids), bool)])
            return RecentVectors(self.block, self.count + len(ids), alive, int(alive.sum()))
        kept_ids, kept_rows = self.rows()
        if len(kept_ids):
            ids, matrix = np.concatenate([kept_ids, ids]), np.concatenate([kept_rows, matrix])
        block = Block(max(BLOCK_MIN, 2 * len(ids)), matrix.shape[1])
        block.claim(0, ids, matrix)
        total = len(ids)
        return RecentVectors(block, total, None, total)

    def live_ids(self) -> Any:
        """The ids of the live rows, in the order they came."""
        if self.block is None:
            return np.zeros(0, np.int64)
        ids = self.block.ids[: self.count]
        return ids if self.alive is None else ids[self.alive]

    def holds(self, memory_ids: Any) -> Any:
        """Whether each of `memory_ids` (numpy int64) is a live recent vector (`np.isin`
        without its overheads: the live ids are sorted once per version)."""
        return _among(memory_ids, self._sorted_ids)

    @cached_property
    def _sorted_ids(self) -> Any:
        return np.sort(self.live_ids())

    def rows(self) -> tuple[Any, Any]:
        """(ids, float32 rows) of the live vectors, in the order they came (copies)."""
        if self.block is None:
            return np.zeros(0, np.int64), np.zeros((0, 0), np.float32)
        rows = self.block.rows[: self.count]
        return self.live_ids().copy(), rows.copy() if self.alive is None else rows[self.alive]

    def similarities(self, vector: Any) -> tuple[Any, Any]:
        """(ids, dot products with `vector`) of the live vectors: scored in place, or, when
        some rows are masked, from the live ones stacked once per version. BLAS groups rows
        by their place in the matrix, and a row's last bit can depend on its group: scoring
        the live rows as one matrix gives each the bits a stacked matrix of them gives. On this
        thread (`row_products`: thousands of rows would wake BLAS threads)."""
        if self.block is None or not self.live:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        if self.alive is None:
            return self.live_ids(), row_products(self.block.rows[: self.count], vector)
        return self._stacked[0], row_products(self._stacked[1], vector)

    @cached_property
    def _stacked(self) -> tuple[Any, Any]:
        return self.rows()

    @property
    def width(self) -> int:
        return 0 if self.block is None else self.block.width

    def __getitem__(self, memory_id: int) -> Any:
        if self.block is not None:
            ids = self.block.ids[: self.count]
            for place in np.flatnonzero(ids == memory_id).tolist():
                if self.alive is None or self.alive[place]:
                    return self.block.rows[place]
        raise KeyError(memory_id)

    def __iter__(self) -> Iterator[int]:
        return iter(self.live_ids().tolist())

    def __len__(self) -> int:
        return self.live


def _among(values: Any, sorted_ids: Any) -> Any:
    """Whether each of `values` is in `sorted_ids` (ascending): `np.isin` for a small
    sorted side, by binary search."""
    if not len(sorted_ids):
        return np.zeros(len(values), bool)
    at = np.minimum(np.searchsorted(sorted_ids, values), len(sorted_ids) - 1)
    return np.asarray(sorted_ids[at] == values)
