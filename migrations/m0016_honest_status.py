"""Honest status: a reflector run keeps why it skipped facts (`skip_reasons`, e.g.
"2 ungrounded, 1 small talk"), and a user message's reply state is found by index (the
dashboard marks messages that got no delivered answer)."""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    "ALTER TABLE reflector_runs ADD COLUMN skip_reasons TEXT NOT NULL DEFAULT ''",
    "CREATE INDEX inbox_message ON inbox (message_id)",
    "CREATE INDEX outbox_inbox ON outbox (inbox_id)",
]


def apply(conn: Any) -> None:
    for statement in STATEMENTS:
        conn.execute(statement)


def apply_postgresql(conn: Any) -> None:
    """The same statements: PostgreSQL takes them as they are."""
    for statement in STATEMENTS:
        conn.execute(statement)
