"""The one way to open Mnemo's PostgreSQL database: a psycopg 3 connection pool, explicit
transactions shared by every store of the process, migrations under an advisory lock.

Why psycopg 3 (not asyncpg): Mnemo's store interfaces are synchronous (SQLite's are, and a
store call never awaits, so a transaction never spans an `await`); psycopg 3 serves that
shape directly, ships a pool (psycopg-pool) that checks and replaces broken connections,
and speaks COPY for `mnemo storage migrate`. asyncpg would have made every store method a
coroutine for no gain in a process whose turns wait on a model for hundreds of ms.

A unit of work is `with db.transaction() as conn:`. The connection it holds is remembered
in a context variable, so every store called inside it (a turn's messages, its inbox state
and its reply) writes through the same connection and commits together or not at all;
nested use joins the outer one. Outside a transaction, `with db.connection() as conn:`
borrows a connection for one statement or a few reads, committed when it returns;
`with db.reading() as conn:` borrows one in autocommit, for reads only (no BEGIN, no COMMIT).

A connection that sat idle for a few seconds is checked before it is lent (a dead one,
after a server restart or a network cut, is replaced); a statement outside a transaction
that still meets a dead connection is retried once on a fresh one (`db.read`,
`db.write`). Inside a transaction the error propagates and it is rolled back whole.
"""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from core.errors import StorageError, StorageFull

logger = logging.getLogger(__name__)

# SQLSTATE classes: 53100 disk_full, 53200 out_of_memory, 08* connection exceptions.
DISK_FULL = "53100"
MIGRATION_LOCK = 0x6D6E656D6F  # "mnemo": one process migrates at a time
IDLE_CHECK_S = 5.0  # a connection idle longer is checked before it is lent

_warned_no_vector = False

Params = Sequence[Any] | dict[str, Any]


@dataclass(frozen=True)
class PgInfo:
    """What `PgDatabase` found: the server and whether pgvector is installed."""

    url: str
    server_version: str
    vector_version: str | None
    vector_error: str | None

    @property
    def vector_loaded(self) -> bool:
        return self.vector_version is not None

    @property
    def display_url(self) -> str:
        """The URL without its password, for logs and `mnemo doctor`."""
        return redact_url(self.url)


def redact_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}"


class PgDatabase:
    """A pool of connections to one PostgreSQL database, and the unit-of-work helpers."""

    def __init__(self, url: str, *, pool_size: int = 4, migrate: bool = True) -> None:
        try:
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError as exc:  # pragma: no cover - both are dependencies
            raise StorageError(f"PostgreSQL needs psycopg and psycopg-pool: {exc}") from exc
        self.url = url
        self._idle_since: dict[int, float] = {}
        self._current: ContextVar[psycopg.Connection[Any] | None] = ContextVar(
            f"mnemo_pg_{id(self)}", default=None
        )
        self.pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            open=False,
            check=self._check_if_idle,
            kwargs={"autocommit": False, "connect_timeout": 10},
            name="mnemo",
            timeout=30,
        )
        try:  # one direct attempt first: a wrong URL fails at once, not after the pool's retries
            psycopg.connect(url, connect_timeout=10).close()
            self.pool.open(wait=True, timeout=15)
        except Exception as exc:
            self.pool.close()
            raise StorageError(f"cannot connect to {redact_url(url)}: {_first_line(exc)}") from None
        self.info = self._inspect()
        if migrate:
            self.migrate()

    # -- the pool's callbacks ---------------------------------------------------------

    @contextmanager
    def _borrowed(self) -> Iterator[Any]:
        """A pooled connection, its return time noted for `_check_if_idle`. Noted here, not
        in a pool `reset` callback: with one, psycopg_pool hands every returned connection
        to a worker thread (a thread switch per statement, ~0.2 ms of CPU, and the next
        statement may find it not back yet)."""
        with self.pool.connection() as conn:
            try:
                yield conn
            finally:
                self._idle_since[id(conn)] = time.monotonic()

    def _check_if_idle(self, conn: Any) -> None:
        """Check a connection before lending it (a round trip) only if it sat idle for a
        while or the server has said something on it since (a terminated backend sends its
        FATAL notice and closes the socket: readable, seen without a round trip), so a busy
        bot skips the round trip per borrow and still never gets a dead connection."""
        from psycopg_pool import ConnectionPool

        idle = time.monotonic() - self._idle_since.get(id(conn), 0.0)
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
        if idle > IDLE_CHECK_S or readable:
            ConnectionPool.check_connection(conn)

    # -- units of work ------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """One transaction on one connection; stores called inside share it. Nested: joins."""
        current = self._current.get()
        if current is not None:
            yield current
            return
        with _translated(), self._borrowed() as conn:
            token = self._current.set(conn)
            try:
                yield conn  # the pool commits on a clean exit, rolls back on an exception
            finally:
                self._current.reset(token)

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """The open transaction's connection, or a borrowed one committed on return."""
        current = self._current.get()
        if current is not None:
            yield current
            return
        with _translated(), self._borrowed() as conn:
            yield conn

    @contextmanager
    def reading(self) -> Iterator[Any]:
        """A connection for a few reads: the open transaction's, or a borrowed one in
        autocommit, so that each read is one round trip (`connection()` costs a `BEGIN` before
        the first statement and a `COMMIT` when it returns, two more round trips)."""
        current = self._current.get()
        if current is not None:
            yield current
            return
        with _translated(), self._borrowed() as conn:
            conn.autocommit = True
            try:
                yield conn
            finally:
                if not conn.closed:
                    conn.autocommit = False

    def in_transaction(self) -> bool:
        return self._current.get() is not None

    def read(self, sql: str, params: Params = (), *, binary: bool = False) -> list[tuple[Any, ...]]:
        """Every row of one query (retried once on a fresh connection if the connection died
        and no transaction is open); `binary`: in PostgreSQL's binary format (a large `bytea`
        comes about three times faster than as hex text)."""
        rows: list[tuple[Any, ...]] = self._retrying(
            lambda conn: conn.execute(sql, params, binary=binary).fetchall()
        )
        return rows

    def read_one(
        self, sql: str, params: Params = (), *, binary: bool = False
    ) -> tuple[Any, ...] | None:
        rows = self.read(sql, params, binary=binary)
        return rows[0] if rows else None

    def write(self, sql: str, params: Params = ()) -> int:
        """One statement; its row count. Committed at once unless a transaction is open."""
        return int(self._retrying(lambda conn: conn.execute(sql, params).rowcount))

    def vacuum(self, tables: Sequence[str] = ()) -> None:
        """VACUUM `tables` (none: every table): the dead rows a deletion left are removed
        from the tables and their indexes, and their space is marked for reuse (not zeroed:
        README "Your data"). Outside any transaction, which VACUUM cannot run in."""
        if self.in_transaction():
            raise StorageError("VACUUM cannot run inside a transaction")
        if bad := [table for table in tables if not table.isidentifier()]:
            raise StorageError(f"not a table name: {bad[0]!r}")
        self.write(f"VACUUM {', '.join(tables)}".rstrip())

    def _retrying(self, work: Any) -> Any:
        """One statement: in the open transaction, else on a borrowed connection in
        autocommit (no BEGIN/COMMIT round trips), retried once on a fresh connection."""
        import psycopg

        if self.in_transaction():
            with self.connection() as conn:
                return work(conn)
        for attempt in (1, 2):
            try:
                with _translated(), self._borrowed() as conn:
                    conn.autocommit = True
                    try:
                        return work(conn)
                    finally:
                        if not conn.closed:
                            conn.autocommit = False
            except StorageError as exc:
                if attempt == 2 or not isinstance(exc.__cause__, psycopg.OperationalError):
                    raise
                logger.warning("PostgreSQL connection lost (%s); retrying once", exc)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- setup --------------------------------------------------------------------

    def _inspect(self) -> PgInfo:
        global _warned_no_vector
        with self.connection() as conn:
            version = str(conn.execute("SHOW server_version").fetchone()[0])
            row = conn.execute(
                "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
            ).fetchone()
        if row is None:
            error = "the pgvector extension is not installed on the server"
            if not _warned_no_vector:
                logger.warning("%s; memory ranking runs in this process", error)
                _warned_no_vector = True
            return PgInfo(self.url, version, None, error)
        return PgInfo(self.url, version, str(row[0]), None)

    def migrate(self, upto: int | None = None) -> list[str]:
        """Apply pending migrations in one transaction, under an advisory lock so that
        processes starting together migrate once."""
        from migrations import migrate_postgresql

        with self.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            if self.info.vector_loaded:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            return migrate_postgresql(conn, upto)

    def close(self) -> None:
        self.pool.close()


@contextmanager
def _translated() -> Iterator[None]:
    """psycopg's errors as Mnemo's: a full disk is `StorageFull`, a lost or refused
    connection a `StorageError` (its cause kept, so callers can tell)."""
    import psycopg
    from psycopg_pool import PoolTimeout

    try:
        yield
    except psycopg.errors.DiskFull as exc:
        raise StorageFull(f"the database server's disk is full: {_first_line(exc)}") from exc
    except psycopg.OperationalError as exc:
        raise StorageError(f"PostgreSQL: {_first_line(exc)}") from exc
    except PoolTimeout as exc:
        raise StorageError(f"no PostgreSQL connection within 30 s: {exc}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
