"""Chats, messages, sessions and LLM usage: the schema every later migration builds on."""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    """CREATE TABLE chats (
        id INTEGER PRIMARY KEY,
        channel TEXT NOT NULL,
        external_chat_id TEXT NOT NULL,
        title TEXT,
        kind TEXT NOT NULL DEFAULT 'private',
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (channel, external_chat_id)
    )""",
    """CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
        sender TEXT,
        content TEXT NOT NULL DEFAULT '',
        tool_calls TEXT,
        tool_call_id TEXT,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        token_estimate INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX messages_chat_id ON messages (chat_id, id)",
    """CREATE TABLE sessions (
        chat_id INTEGER PRIMARY KEY REFERENCES chats(id) ON DELETE CASCADE,
        summary TEXT,
        compaction_count INTEGER NOT NULL DEFAULT 0,
        started_at_message_id INTEGER NOT NULL DEFAULT 0,
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
    """CREATE TABLE llm_usage (
        id INTEGER PRIMARY KEY,
        chat_id INTEGER REFERENCES chats(id) ON DELETE SET NULL,
        kind TEXT NOT NULL,
        model TEXT NOT NULL,
        prompt_tokens INTEGER,
        completion_tokens INTEGER,
        latency_ms INTEGER NOT NULL,
        ok INTEGER NOT NULL DEFAULT 1,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
    "CREATE INDEX llm_usage_chat ON llm_usage (chat_id, created_at)",
]


def apply(conn: Any) -> None:
    for statement in STATEMENTS:
        conn.execute(statement)
