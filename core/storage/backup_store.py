"""Copies of the database: `mnemo backup` and `mnemo restore`, through SQLite's online
backup API (`Connection.backup`).

The database runs in WAL mode, so copying the file while Mnemo runs can catch it between a
commit and a checkpoint; the backup API copies one consistent snapshot instead, page by
page, while bot processes keep reading and writing. Every copy is checked before it counts:
`PRAGMA integrity_check`, and the row count of every table against the snapshot it came
from. A restore replaces the database only while no other process has it open (the
connection takes SQLite's exclusive lock), after a safety copy of what it replaces.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core.clock import utc_now
from core.errors import InputError, StorageError
from core.storage.db import (
    Connection,
    DatabaseError,
    OperationalError,
    connect,
    ensure_data_dir,
    open_copy,
)

REQUIRED_TABLES = ("_migrations", "chats", "messages")
SHOWN_TABLES = ("chats", "messages", "memories", "strategies")


@dataclass(frozen=True)
class CopyReport:
    """What a backup or restore wrote, as checked afterwards."""

    path: Path
    bytes: int
    rows: dict[str, int]  # every table (virtual ones aside) → its rows
    safety_copy: Path | None = None  # restore: the database as it was before

    def lines(self) -> list[str]:
        shown = ", ".join(
            f"{name} {self.rows[name]:,}" for name in SHOWN_TABLES if name in self.rows
        )
        total = sum(self.rows.values())
        return [
            f"wrote {self.path} ({self.bytes / 1_000_000:.2f} MB), integrity ok",
            f"rows: {shown}; {total:,} rows in {len(self.rows)} tables, as in the source",
        ]


def table_rows(conn: Connection) -> dict[str, int]:
    """Rows per table, virtual tables aside (their rows live in shadow tables, counted
    here, so no extension module is needed to count them)."""
    names = [
        str(row[0])
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " AND coalesce(sql, '') NOT LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name"
        )
    ]
    return {
        name: int(conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]) for name in names
    }


def check_copy(conn: Connection, expected: dict[str, int] | None) -> dict[str, int]:
    """The copy's rows per table, once it passed `integrity_check` (and holds `expected`)."""
    verdict = [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
    if verdict != ["ok"]:
        raise StorageError(f"the copy fails integrity_check: {'; '.join(verdict[:3])}")
    rows = table_rows(conn)
    if expected is not None and rows != expected:
        differ = sorted(
            name for name in set(rows) | set(expected) if rows.get(name) != expected.get(name)
        )
        raise StorageError(f"the copy's row counts differ from the source in {', '.join(differ)}")
    return rows


@contextmanager
def _plain(path: Path) -> Iterator[Connection]:
    conn = open_copy(path)
    try:
        yield conn
    finally:
        conn.close()


def backup_database(source: Path, target: Path, *, overwrite: bool = False) -> CopyReport:
    """Copy the database at `source` to `target` (a directory gets `mnemo-<time>.db`),
    through a temporary file renamed only once the copy is checked."""
    if not source.is_file():
        raise InputError(f"no database at {source}")
    if target.is_dir():
        target = target / f"mnemo-{utc_now().strftime('%Y%m%dT%H%M%S')}.db"
    if target.exists() and not overwrite:
        raise InputError(f"{target} exists; name another file, or overwrite it with --force")
    if target.exists() and target.resolve() == source.resolve():
        raise InputError("the backup cannot be the database itself")
    ensure_data_dir(target.parent)
    partial = target.with_name(f"{target.name}.partial")
    partial.unlink(missing_ok=True)
    live = connect(source, load_vec=False, migrate=False)
    try:
        with _plain(partial) as copy:
            live.execute("BEGIN")  # one read snapshot: the counts and the pages copied
            try:
                expected = table_rows(live)
                live.backup(copy)
            finally:
                live.execute("COMMIT")
            copy.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
            rows = check_copy(copy, expected)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        live.close()
    os.replace(partial, target)
    return CopyReport(target, target.stat().st_size, rows)


def restore_database(backup: Path, database: Path) -> CopyReport:
    """Replace the database at `database` with the checked copy at `backup`; refused while
    another process has the database open. What it replaces is kept beside it first."""
    if not backup.is_file():
        raise InputError(f"no backup at {backup}")
    if database.exists() and os.path.samefile(backup, database):
        raise InputError("the backup to restore is the database itself; name a backup file")
    expected = _checked_backup(backup)
    ensure_data_dir(database.parent)
    with _plain(database) as live:
        _take_exclusive(live, database)
        safety = None
        if table_rows(live):
            safety = database.with_name(
                f"{database.name}.before-restore-{utc_now().strftime('%Y%m%dT%H%M%S')}"
            )
            with _plain(safety) as kept:
                live.backup(kept)
                kept.execute("PRAGMA journal_mode = DELETE")
        with _plain(backup) as copy:
            copy.backup(live)
        rows = check_copy(live, expected)
    return CopyReport(database, database.stat().st_size, rows, safety)


def _checked_backup(backup: Path) -> dict[str, int]:
    """The rows per table of the Mnemo database at `backup`, once it passed the checks; a
    file that is no SQLite database, or no Mnemo one, is an `InputError` of one line."""
    try:
        with _plain(backup) as copy:
            names = {str(row[0]) for row in copy.execute("SELECT name FROM sqlite_master")}
            if missing := [name for name in REQUIRED_TABLES if name not in names]:
                raise InputError(
                    f"{backup} is not a Mnemo database (no {', '.join(missing)} table)"
                )
            return check_copy(copy, None)
    except DatabaseError as exc:
        raise InputError(f"{backup} is not a readable SQLite database ({exc})") from None


def _take_exclusive(live: Connection, database: Path) -> None:
    """Hold SQLite's exclusive lock on `database` until `live` closes; refused (an
    `InputError`) while any other connection, of any process, has it open."""
    live.execute("PRAGMA locking_mode = EXCLUSIVE")
    try:
        live.execute("BEGIN EXCLUSIVE")
        live.execute("COMMIT")
    except OperationalError as exc:
        raise InputError(
            f"{database} is in use by another process ({exc}); stop every Mnemo process"
            " on it (mnemo run, mnemo reflector) and try again"
        ) from None
