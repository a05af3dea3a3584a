"""Ordered, named schema migrations, each applied in one transaction with its record.

A migration is a module `mNNNN_name.py` in this package defining `apply(conn)` (SQLite)
and `apply_postgresql(conn)` (PostgreSQL, a psycopg connection inside a transaction).
Both engines have the same history and the same tables with the same columns in the same
order (so `mnemo storage migrate` copies table by table); only what SQLite does with
virtual tables (FTS5, sqlite-vec) PostgreSQL does with its own means (tsvector, pgvector).
Applied migrations are recorded in `_migrations` and never edited afterwards.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Migration:
    number: int
    name: str
    apply: Callable[[Any], None]
    apply_postgresql: Callable[[Any], None] | None = None


def all_migrations() -> list[Migration]:
    """Every migration in this package, in order."""
    found: list[Migration] = []
    for info in pkgutil.iter_modules(__path__):
        if not (info.name.startswith("m") and info.name[1:5].isdigit()):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found.append(
            Migration(
                int(info.name[1:5]),
                info.name,
                module.apply,
                getattr(module, "apply_postgresql", None),
            )
        )
    found.sort(key=lambda m: m.number)
    numbers = [m.number for m in found]
    if len(numbers) != len(set(numbers)):
        raise RuntimeError(f"duplicate migration numbers: {numbers}")
    return found


def applied_names(conn: Any) -> list[str]:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS _migrations ("
        " name TEXT PRIMARY KEY, applied_at TEXT NOT NULL DEFAULT (datetime('now')))"
    )
    return [row[0] for row in conn.execute("SELECT name FROM _migrations ORDER BY name")]


def migrate(conn: Any, upto: int | None = None) -> list[str]:
    """Apply pending migrations (up to number `upto` if given); return their names."""
    done = set(applied_names(conn))
    newly: list[str] = []
    for migration in all_migrations():
        if migration.name in done or (upto is not None and migration.number > upto):
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            migration.apply(conn)
            conn.execute("INSERT INTO _migrations (name) VALUES (?)", (migration.name,))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        logger.info("applied migration %s", migration.name)
        newly.append(migration.name)
    return newly


# Timestamps are ISO-8601 UTC text in both engines ('2026-11-24T10:00:00.123Z'), so records,
# comparisons and copies between engines stay byte-identical.
PG_NOW_FUNCTION = """CREATE OR REPLACE FUNCTION mnemo_now() RETURNS text LANGUAGE sql VOLATILE AS
    $$ SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$"""


def migrate_postgresql(conn: Any, upto: int | None = None) -> list[str]:
    """Apply pending migrations inside the caller's transaction (`PgDatabase.migrate`
    holds the advisory lock); return their names."""
    conn.execute(PG_NOW_FUNCTION)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS _migrations ("
        " name TEXT PRIMARY KEY, applied_at TEXT NOT NULL DEFAULT mnemo_now())"
    )
    done = {row[0] for row in conn.execute("SELECT name FROM _migrations")}
    newly: list[str] = []
    for migration in all_migrations():
        if migration.name in done or (upto is not None and migration.number > upto):
            continue
        if migration.apply_postgresql is None:
            raise RuntimeError(f"migration {migration.name} has no PostgreSQL version")
        migration.apply_postgresql(conn)
        conn.execute("INSERT INTO _migrations (name) VALUES (%s)", (migration.name,))
        logger.info("applied migration %s (PostgreSQL)", migration.name)
        newly.append(migration.name)
    return newly
