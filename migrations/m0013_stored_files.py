"""Files kept in the database: a PostgreSQL deployment's AGENTS.md files, stored tool results
and compaction archives (`core.pg_file_store`), so every machine reads the same ones. SQLite
deployments keep them as files under the data dir; the table exists there too (same history
on both engines) and stays empty."""

from __future__ import annotations

from typing import Any

SQLITE = [
    """CREATE TABLE stored_files (
        path TEXT PRIMARY KEY,  -- relative to the data dir, '/'-separated: telegram/42/AGENTS.md
        content TEXT NOT NULL,
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
]

POSTGRESQL = [
    """CREATE TABLE stored_files (
        path TEXT COLLATE "C" PRIMARY KEY,
        content TEXT NOT NULL,
        updated_at TEXT NOT NULL DEFAULT mnemo_now()
    )""",
]


def apply(conn: Any) -> None:
    for statement in SQLITE:
        conn.execute(statement)


def apply_postgresql(conn: Any) -> None:
    for statement in POSTGRESQL:
        conn.execute(statement)
