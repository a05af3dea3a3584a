"""The one way to open Mnemo's SQLite database: WAL, foreign keys, busy timeout, sqlite-vec.

`secure_delete` is on: a deleted row's bytes are overwritten with zeros, in its page and in
pages that fall free, so "deleted for good" (a chat deleted, a memory forgotten) leaves no
copy in the file once `scrub_deleted()` has checkpointed the WAL into it.

SQLite comes from `pysqlite3` (a modern build that can load extensions) when it is
installed, else from the standard library. Transactions are explicit: the connection
is in autocommit mode and `transaction()` wraps a unit of work. Never `await` inside one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

try:  # pragma: no cover - which branch runs depends on the platform
    from pysqlite3 import dbapi2 as sqlite3
except ImportError:  # pragma: no cover
    import sqlite3

from core.errors import DatabaseGone, StorageError, StorageFull

logger = logging.getLogger(__name__)

SQLITE_FULL = 13  # the result code of "database or disk is full"
IntegrityError = sqlite3.IntegrityError
OperationalError = sqlite3.OperationalError
DatabaseError = sqlite3.DatabaseError

_warned_no_vec = False


@dataclass(frozen=True)
class DatabaseInfo:
    path: str
    sqlite_version: str
    vec_version: str | None
    vec_error: str | None
    file_id: tuple[int, int] | None = None  # (device, inode) of the file opened

    @property
    def vec_loaded(self) -> bool:
        return self.vec_version is not None


class Connection(sqlite3.Connection):  # type: ignore[misc]
    """A SQLite connection that knows what `connect()` found (`.info`)."""

    info: DatabaseInfo


def _load_vec(conn: Connection) -> tuple[str | None, str | None]:
    """Load sqlite-vec into `conn`; return (version, error)."""
    global _warned_no_vec
    try:
        import sqlite_vec

        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        version = conn.execute("SELECT vec_version()").fetchone()[0]
        return str(version), None
    except Exception as exc:  # any failure means: carry on without vectors
        if not _warned_no_vec:
            logger.warning(
                "sqlite-vec could not be loaded (%s); memory ranking falls back to keywords", exc
            )
            _warned_no_vec = True
        return None, f"{type(exc).__name__}: {exc}"


def ensure_data_dir(directory: Path) -> None:
    """Create the data dir (the database's directory) if it is missing; if it cannot be,
    a `StorageError` of one line that says why (the CLI prints it, no traceback)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create data_dir {directory}: {exc.strerror or exc}") from None


def connect(path: str | Path, *, load_vec: bool = True, migrate: bool = True) -> Connection:
    """Open (and by default migrate) the database at `path`.

    The returned connection has `.info` (a `DatabaseInfo`) describing what loaded.
    """
    path = str(path)
    if path != ":memory:":
        ensure_data_dir(Path(path).parent)
    try:
        conn: Connection = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=10, factory=Connection
        )
        conn.execute("PRAGMA busy_timeout = 10000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA secure_delete = ON")
    except sqlite3.DatabaseError as exc:
        raise StorageError(f"cannot open database {path}: {exc}") from exc
    vec_version, vec_error = _load_vec(conn) if load_vec else (None, "disabled")
    conn.info = DatabaseInfo(path, sqlite3.sqlite_version, vec_version, vec_error, _file_id(path))
    if migrate:
        from migrations import migrate as apply_migrations

        try:
            apply_migrations(conn)
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"migrating {path} failed: {exc}") from exc
    return conn


def _file_id(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`, None for a database in memory or none there."""
    if path == ":memory:" or path.startswith("file:"):
        return None
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def check_file(conn: Connection) -> None:
    """Raise `DatabaseGone` when the file at the database's path is not the one this
    connection has open (deleted, or another put in its place): what it wrote from then on
    would be lost at the next start."""
    opened = conn.info.file_id
    if opened is None:
        return
    now = _file_id(conn.info.path)
    if now != opened:
        what = "deleted" if now is None else "replaced by another file"
        raise DatabaseGone(
            f"the database {conn.info.path} was {what} while this process had it open;"
            " stopping so that nothing more is written where no restart will find it"
        )


def open_copy(path: str | Path) -> Connection:
    """A connection to a database file as it is (no WAL switch, no migration, no
    extension, no waiting for locks): for backups and restores, which check copies."""
    conn: Connection = sqlite3.connect(
        str(path), isolation_level=None, timeout=0, factory=Connection
    )
    conn.info = DatabaseInfo(str(path), sqlite3.sqlite_version, None, "not loaded")
    return conn


def scrub_deleted(conn: Connection) -> bool:
    """After a deletion that promises permanence: copy the WAL into the database file (whose
    freed bytes `secure_delete` zeroed) and truncate it, so the WAL keeps no earlier page
    images holding the deleted text. False (and a warning) when another connection's open
    read kept part of the WAL; the next checkpoint finishes it."""
    if conn.in_transaction or conn.info.path == ":memory:":
        return False
    busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        logger.warning(
            "%s: another connection is reading, so the write-ahead log still holds"
            " deleted text until the next checkpoint",
            conn.info.path,
        )
    return not busy


def vec_available(conn: Connection) -> bool:
    """Whether sqlite-vec is loaded in this connection."""
    return conn.info.vec_loaded


@contextmanager
def transaction(conn: Connection) -> Iterator[Connection]:
    """BEGIN IMMEDIATE … COMMIT, rolled back on any exception. Nested use joins the outer one.

    The database file is checked first (`check_file`): a deleted or replaced one raises
    `DatabaseGone`. A full disk or database (SQLITE_FULL, which SQLite may already have
    rolled back) is raised as `StorageFull`, so callers can say that nothing was stored.
    """
    if conn.in_transaction:
        yield conn
        return
    check_file(conn)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except sqlite3.DatabaseError as exc:
        if is_full(exc):
            raise StorageFull(f"the database or disk is full: {exc}") from exc
        raise


def is_full(exc: BaseException) -> bool:
    """Whether `exc` is SQLite's SQLITE_FULL ("database or disk is full")."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code == SQLITE_FULL or "database or disk is full" in str(exc)


@contextmanager
def savepoint(conn: Connection, name: str) -> Iterator[Connection]:
    """A nested unit inside an open transaction: rolled back alone on any exception."""
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield conn
    except BaseException:
        conn.execute(f"ROLLBACK TO {name}")
        conn.execute(f"RELEASE {name}")
        raise
    conn.execute(f"RELEASE {name}")
