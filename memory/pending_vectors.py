"""A chat's float16 vector rows while their saved block is still on its way (PostgreSQL).

At 100,000 memories the vector snapshot is 74 MB: the server detoasting it and this process
receiving it took most of a chat's first query after a start (~0.25 s of server CPU alone,
seconds at load). The search needs only a few hundred rows of it: the nearest sign codes
(`memory.vector_cache`, saved apart as 5.6 MB, `VECTOR_CODES`) and the keyword hits. So
until the block is here, `PendingBase` answers the rows asked for from the store's float32
vectors (one statement, `MemoryStore.vector_rows`), made float16 exactly as a build makes
them (the same scores as the loaded block: the same bits), and then starts reading the
block on another connection (`MemoryStore.rank_snapshot_later`); once it has arrived, rows
come from it. Merging or saving the vectors waits for it.

A row the store no longer returns (archived or expired since the snapshot; such a memory
never reaches the results) is zeros. A block that turns out not to match (a newer snapshot
saved in between) is made from the store's rows instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

Rows = Callable[[Any], Any]  # ids (ascending) -> float16 matrix, one row each
Block = Callable[[], "Future[Any]"]  # starts reading the block: its float16 matrix, or None


class PendingBase:
    """The float16 base rows of `ChatVectors` (ids ascending), read row by row until the
    whole block (started at the first rows asked for) has arrived. Behaves as the array for
    what `ChatVectors` does with it: rows by positions, a boolean mask, its shape."""

    def __init__(self, ids: Any, dims: int, rows: Rows, block: Block) -> None:
        self.ids = ids
        self.shape = (len(ids), dims)
        self.size = len(ids) * dims
        self.dtype = np.dtype(np.float16)
        # Both hold the store (so its connection) until the block is taken, then go: a
        # cached value must not keep its connection alive (the cache is keyed by it, weakly).
        self._rows: Rows | None = rows
        self._start: Block | None = block
        self._future: Future[Any] | None = None
        self._block: Any = None
        self._lock = threading.Lock()
        self._taking = threading.Lock()
        self.served_by_rows = 0  # searches answered before the block (tests, benchmarks)

    @property
    def loaded(self) -> bool:
        """Whether the block has arrived (and was taken)."""
        return self._block is not None

    def __getitem__(self, key: Any) -> Any:
        positions = np.asarray(key)
        if positions.dtype == bool or not np.issubdtype(positions.dtype, np.integer):
            return self.block()[key]
        ready = self._arrived()
        rows = self._rows
        if ready is not None or rows is None:  # None: the block was just taken
            return self.block()[positions]
        found = rows(self.ids[positions])
        self.served_by_rows += 1
        self._begin()
        return found

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        block = self.block()
        return block if dtype is None else block.astype(dtype)

    def block(self) -> Any:
        """The whole float16 block, waiting for it (or reading it now) if need be."""
        self._begin()
        if self._block is not None:
            return self._block
        assert self._future is not None
        return self._taken(self._future)

    def _begin(self) -> None:
        with self._lock:
            if self._future is None and self._block is None and self._start is not None:
                self._future = self._start()
                self._future.add_done_callback(self._arrive)

    def _arrive(self, future: Future[Any]) -> None:
        """Take the block as soon as it is here (on the reading thread)."""
        try:
            self._taken(future)
        except Exception as exc:  # its rows could not be read either: taken when asked
            logger.warning("taking the saved vectors failed (%s)", exc)

    def _arrived(self) -> Any:
        if self._block is not None:
            return self._block
        future = self._future
        if future is None or not future.done():
            return None
        return self._taken(future)

    def _taken(self, future: Future[Any]) -> Any:
        with self._taking:
            if self._block is not None:
                return self._block
            try:
                block = future.result()
            except Exception as exc:  # the other connection failed: the rows are still here
                logger.warning("reading the saved vectors failed (%s); reading their rows", exc)
                block = None
            if (block is None or block.shape != self.shape) and self._rows is not None:
                block = self._rows(self.ids)
            self._block = block
            self._rows = self._start = None
            return block
