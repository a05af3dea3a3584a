"""Who a memory came from, and tombstones of forgotten memories.

`sender_id` / `sender_name` on `memories`: who said `remember:` in a group (empty for
memories of private chats, the reflector's and older ones); the memory is injected as
`[Ann] …` and only its sender or a group admin may forget it.

`memory_tombstones`: one row per memory forgotten by a person (`/forget`, the delete tool,
`mnemo memory forget`): its text, whose first person it was written in (`speaker`), who
forgot it and when. The reflector does not learn a fact that repeats a tombstone of its
chat (`memory.forgetting`); deleting the chat deletes its tombstones.
"""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    "ALTER TABLE memories ADD COLUMN sender_id TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE memories ADD COLUMN sender_name TEXT NOT NULL DEFAULT ''",
    """CREATE TABLE memory_tombstones (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        chat_id INTEGER REFERENCES chats(id) ON DELETE CASCADE,
        memory_id INTEGER NOT NULL,
        content TEXT NOT NULL,
        speaker TEXT NOT NULL DEFAULT '',
        forgotten_by TEXT NOT NULL DEFAULT '',
        forgotten_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
    "CREATE INDEX memory_tombstones_chat ON memory_tombstones (chat_id, id)",
]


def apply(conn: Any) -> None:
    for statement in STATEMENTS:
        conn.execute(statement)
