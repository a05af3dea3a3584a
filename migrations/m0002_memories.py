"""Structured memories and their full-text index (the vector index is made at startup).

`context` is optional text around a memory (e.g. the message before it) that helps find it
but is never injected; it is indexed with a lower weight and embedded with the content.

`memories_vec` (sqlite-vec) can only be created where sqlite-vec loads and once the
embedding dimension is known, so `memory.index` creates and rebuilds it; the model and
dimension it was built with are recorded in `memory_index_meta`.
"""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    """CREATE TABLE memories (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        chat_id INTEGER REFERENCES chats(id) ON DELETE CASCADE,
        content TEXT NOT NULL CHECK (length(trim(content)) > 0),
        category TEXT NOT NULL CHECK (category IN ('PROFILE', 'KNOWLEDGE', 'EVENT')),
        confidence REAL NOT NULL DEFAULT 0.7 CHECK (confidence >= 0 AND confidence <= 1),
        source TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        last_seen_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        archived INTEGER NOT NULL DEFAULT 0,
        expires_at TEXT,
        embedding_model TEXT,
        context TEXT NOT NULL DEFAULT ''
    )""",
    "CREATE INDEX memories_chat ON memories (chat_id, archived, id)",
    # Store-maintained: `text` and `context` hold tokenised text (CJK as bigrams), `scope`
    # one token naming the chat (`c<id>`, `c0` = global) so chat filtering happens in the index.
    """CREATE VIRTUAL TABLE memories_fts USING fts5(
        text, context, scope, tokenize = 'porter unicode61'
    )""",
    """CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
        DELETE FROM memories_fts WHERE rowid = old.id;
    END""",
    """CREATE TABLE memory_index_meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
]


def apply(conn: Any) -> None:
    for statement in STATEMENTS:
        conn.execute(statement)
