"""`mnemo storage migrate --to postgresql://…`: move a SQLite deployment to PostgreSQL.

Every table is copied with COPY, in foreign-key order, in ONE PostgreSQL transaction: the
target has all of it or nothing. The chats' files (AGENTS.md, stored tool results,
compaction archives) move from the data dir into `stored_files`. Counts are checked per
table after the commit, from a fresh connection; any difference is an error. The SQLite
database is only read (stop the bot first, so nothing arrives after the copy).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.config import Config
from core.errors import StorageError
from core.storage.copy_store import (
    applied_migrations_pg,
    applied_migrations_sqlite,
    pg_columns,
    pg_copy_rows,
    pg_defer_constraints,
    pg_reset_identities,
    pg_row_count,
    pg_tables_in_fk_order,
    pg_triggers,
    sqlite_row_count,
    sqlite_rows,
    sqlite_tables,
)
from core.storage.database import PostgresDatabase
from core.storage.db import Connection, connect
from core.storage.file_store import DatabaseFileStore, DirectoryFileStore
from core.storage.pg_db import PgDatabase

# The chats' files under the data dir: file memory, stored tool results, archives.
CHAT_FILE = re.compile(r"(^|/)AGENTS\.md$|/tool-results/[^/]+$|/archive/[^/]+$")

FILES_TABLE = "stored_files"

Progress = Callable[[str], None]
AfterCopy = Callable[[PgDatabase], str]


@dataclass(frozen=True)
class TableCopy:
    table: str
    source_rows: int
    target_rows: int
    expected_rows: int  # the source's, plus the chat files for `stored_files`

    @property
    def ok(self) -> bool:
        return self.target_rows == self.expected_rows


@dataclass
class MigrationReport:
    tables: list[TableCopy] = field(default_factory=list)
    files: int = 0
    derived: list[str] = field(default_factory=list)  # what PostgreSQL rebuilt from the rows
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(t.source_rows for t in self.tables)

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tables)

    def as_dict(self) -> dict[str, object]:
        return {
            **asdict(self),
            "rows": self.rows,
            "rows_per_second": round(self.rows_per_second),
            "ok": self.ok,
        }


def chat_files(data_dir: Path) -> list[str]:
    """The chat files under `data_dir` that belong in the database."""
    return [path for path in DirectoryFileStore(data_dir).list("") if CHAT_FILE.search(path)]


def migrate_to_postgresql(
    config: Config,
    target_url: str,
    *,
    progress: Progress = lambda line: None,
    after_copy: tuple[AfterCopy, ...] = (),
) -> MigrationReport:
    """Copy the SQLite database of `config` (and its chat files) into the empty PostgreSQL
    database at `target_url`; `after_copy` steps rebuild what PostgreSQL derives."""
    if config.storage.engine != "sqlite":
        raise StorageError("the configured store is already PostgreSQL; migrate copies from SQLite")
    started = time.perf_counter()
    source = connect(config.storage.database_path)
    target = PgDatabase(target_url)
    try:
        _check_compatible(applied_migrations_sqlite(source), applied_migrations_pg(target))
        report = MigrationReport()
        with target.transaction() as pg:
            copied = _copy_tables(source, pg, progress)
            report.files = _copy_files(config.storage.data_dir, target)
            progress(f"files: {report.files:,} (AGENTS.md, tool results, archives)")
            for step in after_copy:
                report.derived.append(step(target))
                progress(report.derived[-1])
        with target.connection() as pg:  # verified after the commit, as another process sees it
            for table in copied:
                rows = sqlite_row_count(source, table)
                expected = rows + (report.files if table == FILES_TABLE else 0)
                report.tables.append(TableCopy(table, rows, pg_row_count(pg, table), expected))
        report.seconds = time.perf_counter() - started
        return report
    finally:
        target.close()
        source.close()


def _copy_tables(source: Connection, pg: Any, progress: Progress) -> list[str]:
    """Every table of `source` into the empty PostgreSQL tables, parents first (inside the
    caller's transaction, its change-log triggers off while copying); the tables copied."""
    tables = sqlite_tables(source)
    pg_defer_constraints(pg)
    order = [t for t in pg_tables_in_fk_order(pg) if t != "_migrations"]
    _check_empty(pg, order)
    missing = sorted(set(tables) - set(order))
    if missing:
        raise StorageError(f"PostgreSQL has no table for {', '.join(missing)}")
    copied = [table for table in order if table in tables]
    for table in copied:
        columns = tuple(c for c in pg_columns(pg, table) if c in tables[table])
        total = sqlite_row_count(source, table)
        pg_triggers(pg, table, enabled=False)
        count = pg_copy_rows(pg, table, columns, sqlite_rows(source, table, columns))
        pg_triggers(pg, table, enabled=True)
        pg_reset_identities(pg, table)
        progress(f"{table}: {count:,} of {total:,} rows")
    return copied


def _copy_files(data_dir: Path, target: PgDatabase) -> int:
    """The chats' files under `data_dir` into `stored_files`; how many."""
    files = DatabaseFileStore(PostgresDatabase(target))
    local = DirectoryFileStore(data_dir)
    paths = chat_files(data_dir)
    for path in paths:
        files.write_text(path, local.read_text(path) or "")
    return len(paths)


def _check_compatible(source: list[str], target: list[str]) -> None:
    if source != target:
        raise StorageError(
            "the two databases are at different migrations (SQLite "
            f"{source[-1] if source else 'none'}, PostgreSQL {target[-1] if target else 'none'}):"
            " run the same Mnemo version on both"
        )


def _check_empty(pg: Any, tables: list[str]) -> None:
    used = {t: n for t in tables if (n := pg_row_count(pg, t))}
    if used:
        listed = ", ".join(f"{t} ({n})" for t, n in sorted(used.items()))
        raise StorageError(
            f"the PostgreSQL database is not empty: {listed}; migrate into an empty one"
        )
