"""What Mnemo has learned about each model and its server (window, template, tools, …)."""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    """CREATE TABLE model_profiles (
        model TEXT PRIMARY KEY,
        facts TEXT NOT NULL DEFAULT '{}',
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
]


def apply(conn: Any) -> None:
    for statement in STATEMENTS:
        conn.execute(statement)


POSTGRESQL = [
    """CREATE TABLE model_profiles (
        model TEXT PRIMARY KEY,
        facts TEXT NOT NULL DEFAULT '{}',
        updated_at TEXT NOT NULL DEFAULT mnemo_now()
    )""",
]


def apply_postgresql(conn: Any) -> None:
    for statement in POSTGRESQL:
        conn.execute(statement)
