"""Context engineering: compactions, the compaction mark on messages, per-model calibration."""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    """CREATE TABLE compactions (
        id INTEGER PRIMARY KEY,
        chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
        trigger TEXT NOT NULL CHECK (trigger IN ('threshold', 'overflow', 'command')),
        status TEXT NOT NULL CHECK (status IN ('summarised', 'fallback')),
        first_message_id INTEGER NOT NULL,
        last_message_id INTEGER NOT NULL,
        messages_compacted INTEGER NOT NULL,
        tokens_before INTEGER NOT NULL,
        tokens_after INTEGER NOT NULL,
        summary_calls INTEGER NOT NULL DEFAULT 0,
        archive_path TEXT NOT NULL DEFAULT '',
        error TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
    "CREATE INDEX compactions_chat ON compactions (chat_id, id)",
    "ALTER TABLE messages ADD COLUMN compaction_id INTEGER REFERENCES compactions(id)",
    """CREATE TABLE context_calibration (
        model TEXT PRIMARY KEY,
        chars_per_token REAL NOT NULL,
        samples INTEGER NOT NULL DEFAULT 0,
        last_ratio REAL,
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
]


def apply(conn: Any) -> None:
    for statement in STATEMENTS:
        conn.execute(statement)
