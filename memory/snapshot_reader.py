"""How the memory store reads saved ranking snapshots (`memory.rank_snapshots`): on
PostgreSQL, asking for a chat's keyword snapshot starts reading its vectors' sign codes on
another pooled connection, so that the two transfers overlap (at 100,000 memories 16 and
5.6 MB, each mostly the server detoasting the blob and this process receiving it) and the
codes are on their way while the keyword lists load, instead of after them; the vectors'
float16 rows (74 MB) are read later, in the background (`later`, `memory.pending_vectors`).

A chat's first hybrid query loads its keyword lists, then its vectors (`memory.chat_cache`),
so the codes read ahead are taken by a later read of the store. A read-ahead waits
until its kind is read or another read-ahead starts, and is dropped when the store saves or
drops snapshots (a forgotten memory's), so at most one blob (5.6 MB at 100,000 memories)
waits in memory. A snapshot read ahead is as good as one read later: it carries the change-log
marks it is current to, and the changes since are applied on top either way. Not inside a
transaction (the other connection would not see its writes), and not on SQLite (one
connection, and a local file read).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

from core.storage.database import Database
from memory import rank_snapshot_store
from memory.store import RankSnapshot

logger = logging.getLogger(__name__)

# The kind read ahead when a kind is read: `memory.keyword_cache.KEYWORDS` ->
# `memory.vector_cache.VECTOR_CODES` (their names, not imported: the store stays free of
# numpy). The vectors' float16 rows are read later, in the background (`later`).
READ_AHEAD = {"keywords": "vector codes"}

Key = tuple[int, str]  # chat scope, snapshot kind


class SnapshotReader:
    """Reads one store's snapshots, reading the vector snapshot ahead on PostgreSQL."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._lock = threading.Lock()
        self._ahead: tuple[Key, Future[RankSnapshot | None]] | None = None
        self.served_ahead = 0  # reads answered by a read-ahead (tests, benchmarks)

    def load(self, scope: int, kind: str, *, read_ahead: bool) -> RankSnapshot | None:
        """The saved snapshot of `kind` for `scope`; `read_ahead`: the caller will likely
        ask for the kind `READ_AHEAD` names next, so start reading it now."""
        future = self._take((scope, kind))
        if future is not None:
            try:
                found = future.result()
            except Exception as exc:  # the read-ahead's own connection failed: read again
                logger.warning("reading the %s snapshot ahead failed (%s); reading it now", kind,
                               exc)  # fmt: skip
            else:
                self.served_ahead += 1
                return found
        following = READ_AHEAD.get(kind)
        if read_ahead and following and self.db.dialect.remote and not self.db.in_transaction():
            self._start((scope, following))
        return rank_snapshot_store.load(self.db, scope, kind)

    def drop_read_ahead(self) -> None:
        """Forget a read-ahead (the store is saving or dropping snapshots)."""
        with self._lock:
            self._ahead = None

    def _take(self, key: Key) -> Future[RankSnapshot | None] | None:
        """The read-ahead of `key`, if one is under way or done; any other one is kept (for
        the read it was started for: a chat's first change may read its keyword docs
        between its keyword lists and its vector codes)."""
        with self._lock:
            ahead = self._ahead
            if ahead is None or ahead[0] != key:
                return None
            self._ahead = None
        return ahead[1]

    def later(self, scope: int, kind: str) -> Future[RankSnapshot | None]:
        """The snapshot of `kind` for `scope`, read on another pooled connection (PostgreSQL,
        outside a transaction), else now. Not a read-ahead: the caller keeps the future."""
        if self.db.dialect.remote and not self.db.in_transaction():
            return self._in_thread((scope, kind), "mnemo-snapshot-read")
        future: Future[RankSnapshot | None] = Future()
        future.set_result(rank_snapshot_store.load(self.db, scope, kind))
        return future

    def _start(self, key: Key) -> None:
        future = self._in_thread(key, "mnemo-snapshot-read-ahead")
        with self._lock:
            self._ahead = (key, future)

    def _in_thread(self, key: Key, name: str) -> Future[RankSnapshot | None]:
        future: Future[RankSnapshot | None] = Future()

        def read() -> None:
            try:
                future.set_result(rank_snapshot_store.load(self.db, *key))
            except BaseException as exc:  # handed to whoever takes the future
                future.set_exception(exc)

        threading.Thread(target=read, name=name, daemon=True).start()
        return future
