"""Reflector runs say how they ended (done, failed, skipped) and whether the batch itself
failed, so a batch that keeps failing is skipped after `[reflector] max_attempts`."""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    "ALTER TABLE reflector_runs ADD COLUMN status TEXT NOT NULL DEFAULT 'done'",
    # 1 when the messages themselves could not be reflected (the request overflowed, the
    # reply was cut or unusable); 0 for outages, which never count towards a skip.
    "ALTER TABLE reflector_runs ADD COLUMN batch_failed INTEGER NOT NULL DEFAULT 0",
    "UPDATE reflector_runs SET status = 'failed' WHERE ok = 0",
]


def apply(conn: Any) -> None:
    for statement in STATEMENTS:
        conn.execute(statement)


def apply_postgresql(conn: Any) -> None:
    """The same statements: PostgreSQL's ALTER TABLE … ADD COLUMN takes them as they are."""
    for statement in STATEMENTS:
        conn.execute(statement)
