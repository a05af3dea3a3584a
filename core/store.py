"""SessionStore: chats, their messages, the current session and LLM usage, in SQLite."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from core.db import Connection, transaction

DEFAULT_CHARS_PER_TOKEN = 4.0


def estimate_tokens(text: str, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN) -> int:
    """A character-based token estimate (the context module calibrates the ratio)."""
    return int(len(text) / chars_per_token) + 1


@dataclass(frozen=True)
class Chat:
    id: int
    channel: str
    external_chat_id: str
    title: str
    kind: str

    @property
    def key(self) -> str:
        return f"{self.channel}:{self.external_chat_id}"


@dataclass(frozen=True)
class StoredMessage:
    id: int
    chat_id: int
    role: str
    sender: str
    content: str
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    created_at: str
    token_estimate: int

    def to_openai(self) -> dict[str, Any]:
        """This message as an OpenAI chat `messages` entry."""
        message: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        if self.tool_call_id:
            message["tool_call_id"] = self.tool_call_id
        return message


@dataclass(frozen=True)
class NewMessage:
    """A message not yet stored."""

    role: str
    content: str
    sender: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


@dataclass(frozen=True)
class Session:
    chat_id: int
    summary: str | None
    compaction_count: int
    started_at_message_id: int
    updated_at: str


_MESSAGE_COLUMNS = (
    "id, chat_id, role, sender, content, tool_calls, tool_call_id, created_at, token_estimate"
)


def _message(row: tuple[Any, ...]) -> StoredMessage:
    return StoredMessage(
        id=row[0],
        chat_id=row[1],
        role=row[2],
        sender=row[3] or "",
        content=row[4] or "",
        tool_calls=json.loads(row[5]) if row[5] else None,
        tool_call_id=row[6],
        created_at=row[7],
        token_estimate=row[8],
    )


class SessionStore:
    """All reads and writes of chats, messages, sessions and usage go through here."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def get_or_create_chat(
        self, channel: str, external_chat_id: str, title: str = "", kind: str = "private"
    ) -> Chat:
        with transaction(self.conn):
            self.conn.execute(
                "INSERT INTO chats (channel, external_chat_id, title, kind) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (channel, external_chat_id) DO UPDATE SET"
                " title = CASE WHEN excluded.title != '' THEN excluded.title ELSE title END",
                (channel, external_chat_id, title, kind),
            )
            row = self.conn.execute(
                "SELECT id, channel, external_chat_id, title, kind FROM chats"
                " WHERE channel = ? AND external_chat_id = ?",
                (channel, external_chat_id),
            ).fetchone()
            self.conn.execute("INSERT OR IGNORE INTO sessions (chat_id) VALUES (?)", (row[0],))
        return Chat(row[0], row[1], row[2], row[3] or "", row[4])

    def find_chat(self, channel: str, external_chat_id: str) -> Chat | None:
        row = self.conn.execute(
            "SELECT id, channel, external_chat_id, title, kind FROM chats"
            " WHERE channel = ? AND external_chat_id = ?",
            (channel, external_chat_id),
        ).fetchone()
        return Chat(row[0], row[1], row[2], row[3] or "", row[4]) if row else None

    def chat_by_id(self, chat_id: int) -> Chat | None:
        row = self.conn.execute(
            "SELECT id, channel, external_chat_id, title, kind FROM chats WHERE id = ?",
            (chat_id,),
        ).fetchone()
        return Chat(row[0], row[1], row[2], row[3] or "", row[4]) if row else None

    def append(self, chat_id: int, messages: list[NewMessage]) -> list[int]:
        """Store `messages` in one transaction; return their ids in order."""
        ids: list[int] = []
        with transaction(self.conn):
            for message in messages:
                cursor = self.conn.execute(
                    "INSERT INTO messages (chat_id, role, sender, content, tool_calls,"
                    " tool_call_id, token_estimate) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        chat_id,
                        message.role,
                        message.sender,
                        message.content,
                        json.dumps(message.tool_calls) if message.tool_calls else None,
                        message.tool_call_id,
                        estimate_tokens(message.content)
                        + estimate_tokens(json.dumps(message.tool_calls or "")),
                    ),
                )
                ids.append(int(cursor.lastrowid))
        return ids

    def session(self, chat_id: int) -> Session:
        row = self.conn.execute(
            "SELECT chat_id, summary, compaction_count, started_at_message_id, updated_at"
            " FROM sessions WHERE chat_id = ?",
            (chat_id,),
        ).fetchone()
        if row is None:
            self.conn.execute("INSERT OR IGNORE INTO sessions (chat_id) VALUES (?)", (chat_id,))
            return self.session(chat_id)
        return Session(row[0], row[1], row[2], row[3], row[4])

    def history(self, chat_id: int, *, after_id: int | None = None) -> list[StoredMessage]:
        """The current session's messages, oldest first (after `after_id` if given)."""
        start = self.session(chat_id).started_at_message_id if after_id is None else after_id
        rows = self.conn.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE chat_id = ? AND id > ? ORDER BY id",
            (chat_id, start),
        ).fetchall()
        return [_message(row) for row in rows]

    def messages_between(self, chat_id: int, after_id: int, limit: int) -> list[StoredMessage]:
        """Up to `limit` messages of the chat newer than `after_id`, oldest first."""
        rows = self.conn.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE chat_id = ? AND id > ?"
            " ORDER BY id LIMIT ?",
            (chat_id, after_id, limit),
        ).fetchall()
        return [_message(row) for row in rows]

    def count_messages(self, chat_id: int) -> int:
        return int(
            self.conn.execute(
                "SELECT count(*) FROM messages WHERE chat_id = ?", (chat_id,)
            ).fetchone()[0]
        )

    def reset_session(self, chat_id: int) -> None:
        """Start a new session: later requests see only newer messages; nothing is deleted."""
        with transaction(self.conn):
            last = self.conn.execute(
                "SELECT coalesce(max(id), 0) FROM messages WHERE chat_id = ?", (chat_id,)
            ).fetchone()[0]
            self.conn.execute(
                "UPDATE sessions SET summary = NULL, started_at_message_id = ?,"
                " updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE chat_id = ?",
                (last, chat_id),
            )

    def record_usage(
        self,
        chat_id: int | None,
        kind: str,
        model: str,
        prompt_tokens: int | None,
        completion_tokens: int | None,
        latency_ms: int,
        ok: bool = True,
    ) -> None:
        self.conn.execute(
            "INSERT INTO llm_usage (chat_id, kind, model, prompt_tokens, completion_tokens,"
            " latency_ms, ok) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (chat_id, kind, model, prompt_tokens, completion_tokens, latency_ms, int(ok)),
        )
