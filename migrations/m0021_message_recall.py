"""The episodic recall index: `message_recall`, one row per stored chat message it covers.

Derived from `messages` (rebuildable): the message's text, speaker and date are read from
`messages` itself; this table holds what ranking needs beside them, the message's vector
(float32 bytes, NULL when no embedding model was loaded) and the model that made it.
Deleting a message or its chat deletes its row (ON DELETE CASCADE, and the forget paths
delete explicitly). Keyword postings are built in the process from the rows.

One SQL text for both engines; only the byte type differs.
"""

from __future__ import annotations

from typing import Any

TABLE = """CREATE TABLE message_recall (
    message_id BIGINT PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
    chat_id BIGINT NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    embedding {blob},
    model TEXT NOT NULL DEFAULT ''
)"""
INDEX = "CREATE INDEX message_recall_chat ON message_recall (chat_id, message_id)"


def apply(conn: Any) -> None:
    conn.execute(TABLE.format(blob="BLOB"))
    conn.execute(INDEX)


def apply_postgresql(conn: Any) -> None:
    conn.execute(TABLE.format(blob="BYTEA"))
    conn.execute(INDEX)
