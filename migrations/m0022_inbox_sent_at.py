"""When a message was sent, as the platform says: `inbox.sent_at` (ISO 8601, '' unknown).

A message that waits in the inbox (behind another turn, or across a restart) keeps the time
it was sent, so its history row carries that time rather than the time its turn ran (the
recall index dates messages by it). One SQL text for both engines.
"""

from __future__ import annotations

from typing import Any

COLUMN = "ALTER TABLE inbox ADD COLUMN sent_at TEXT NOT NULL DEFAULT ''"


def apply(conn: Any) -> None:
    conn.execute(COLUMN)


def apply_postgresql(conn: Any) -> None:
    conn.execute(COLUMN)
