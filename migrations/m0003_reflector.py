"""The reflector's bookkeeping: per-chat cursor, run log, chat leases, supersede edges."""

from __future__ import annotations

from typing import Any

_NOW = "(strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"

STATEMENTS = [
    f"""CREATE TABLE memory_reflector_state (
        chat_id INTEGER PRIMARY KEY REFERENCES chats(id) ON DELETE CASCADE,
        last_message_id INTEGER NOT NULL DEFAULT 0,
        updated_at TEXT NOT NULL DEFAULT {_NOW}
    )""",
    f"""CREATE TABLE reflector_runs (
        id INTEGER PRIMARY KEY,
        chat_id INTEGER REFERENCES chats(id) ON DELETE CASCADE,
        started_at TEXT NOT NULL,
        finished_at TEXT NOT NULL DEFAULT {_NOW},
        first_message_id INTEGER,
        last_message_id INTEGER,
        messages_seen INTEGER NOT NULL DEFAULT 0,
        memories_added INTEGER NOT NULL DEFAULT 0,
        memories_updated INTEGER NOT NULL DEFAULT 0,
        memories_refreshed INTEGER NOT NULL DEFAULT 0,
        memories_skipped INTEGER NOT NULL DEFAULT 0,
        model TEXT NOT NULL DEFAULT '',
        prompt_tokens INTEGER,
        completion_tokens INTEGER,
        ok INTEGER NOT NULL,
        error TEXT
    )""",
    "CREATE INDEX reflector_runs_chat ON reflector_runs (chat_id, id)",
    """CREATE TABLE reflector_leases (
        chat_id INTEGER PRIMARY KEY REFERENCES chats(id) ON DELETE CASCADE,
        owner TEXT NOT NULL,
        expires_at REAL NOT NULL
    )""",
    f"""CREATE TABLE memory_supersede_edges (
        old_id INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
        new_id INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
        created_at TEXT NOT NULL DEFAULT {_NOW},
        PRIMARY KEY (old_id, new_id)
    )""",
    "CREATE INDEX memory_supersede_edges_new ON memory_supersede_edges (new_id)",
]


def apply(conn: Any) -> None:
    for statement in STATEMENTS:
        conn.execute(statement)
