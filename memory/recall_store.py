"""`RecallStore`: the SQL of the episodic recall index (`message_recall`, migration m0021),
written once for both engines on the `Database` seam.

The index covers a chat's user and assistant messages with text, compacted ones included;
the text, speaker and date are read from `messages`, the vectors from `message_recall`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.storage.database import Database

INDEXED_ROLES = ("user", "assistant")


@dataclass(frozen=True)
class RecallRow:
    """One indexed message as ranking reads it."""

    message_id: int
    role: str
    speaker: str
    content: str
    said_at: str  # the message's stored time, UTC text form
    embedding: bytes | None = None


@dataclass(frozen=True)
class IndexState:
    """How many rows a chat's index holds and its newest message id: a cheap signature
    that tells an in-process copy whether it is still current."""

    count: int
    newest: int


_ROW = "m.id, m.role, coalesce(m.sender, ''), m.content, m.created_at"
_ROLES = "m.role IN ('user', 'assistant') AND m.content <> ''"


def _row(row: Sequence[Any], with_vector: bool) -> RecallRow:
    blob = row[5] if with_vector else None
    return RecallRow(
        int(row[0]),
        str(row[1]),
        str(row[2]),
        str(row[3]),
        str(row[4]),
        bytes(blob) if blob is not None else None,
    )


class RecallStore:
    """The one door to `message_recall`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @property
    def cache_key(self) -> object:
        """What in-process copies of the index are shared by (one per database handle)."""
        return self.db

    def unindexed(self, chat_id: int, limit: int, up_to: int | None = None) -> list[RecallRow]:
        """The chat's oldest messages (up to id `up_to`) newer than its newest indexed one."""
        bound, params = ("AND m.id <= ?", (up_to,)) if up_to is not None else ("", ())
        rows = self.db.read(
            f"SELECT {_ROW} FROM messages m WHERE m.chat_id = ? AND {_ROLES}"
            " AND m.id > (SELECT coalesce(max(message_id), 0) FROM message_recall"
            f" WHERE chat_id = ?) {bound} ORDER BY m.id LIMIT ?",
            (chat_id, chat_id, *params, limit),
        )
        return [_row(row, False) for row in rows]

    def add(
        self, chat_id: int, rows: Sequence[RecallRow], vectors: Sequence[bytes | None], model: str
    ) -> None:
        """Index `rows` with their vectors (None: no vector); a row already there is kept."""
        self.db.write_many(
            "INSERT INTO message_recall (message_id, chat_id, embedding, model)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (message_id) DO NOTHING",
            [
                (row.message_id, chat_id, vector, model if vector is not None else "")
                for row, vector in zip(rows, vectors, strict=True)
            ],
        )

    def rows(self, chat_id: int, after_id: int = 0) -> list[RecallRow]:
        """The chat's indexed messages newer than `after_id`, with their vectors, oldest first."""
        rows = self.db.read(
            f"SELECT {_ROW}, r.embedding FROM message_recall r JOIN messages m"
            " ON m.id = r.message_id WHERE r.chat_id = ? AND r.message_id > ?"
            " ORDER BY r.message_id",
            (chat_id, after_id),
        )
        return [_row(row, True) for row in rows]

    def by_ids(self, chat_id: int, message_ids: Sequence[int]) -> list[RecallRow]:
        """These messages of the chat (indexed or not, without vectors), oldest first."""
        if not message_ids:
            return []
        in_ids, params = self.db.dialect.in_values("m.id", [int(i) for i in message_ids])
        rows = self.db.read(
            f"SELECT {_ROW} FROM messages m WHERE m.chat_id = ? AND {in_ids} ORDER BY m.id",
            (chat_id, *params),
        )
        return [_row(row, False) for row in rows]

    def state(self, chat_id: int) -> IndexState:
        row = self.db.read_one(
            "SELECT count(*), coalesce(max(message_id), 0) FROM message_recall WHERE chat_id = ?",
            (chat_id,),
        )
        return IndexState(int(row[0]), int(row[1])) if row else IndexState(0, 0)

    def count_unembedded(self) -> int:
        """Indexed messages without a vector (indexed while no embedding model was loaded)."""
        row = self.db.read_one("SELECT count(*) FROM message_recall WHERE embedding IS NULL")
        return int(row[0]) if row else 0

    def count(self, chat_id: int) -> int:
        return self.state(chat_id).count

    def recently_active_chats(self, since: str, limit: int) -> list[int]:
        """Chats with a message stored at or after `since` (UTC text form), busiest first."""
        rows = self.db.read(
            "SELECT chat_id FROM messages WHERE created_at >= ? GROUP BY chat_id"
            " ORDER BY count(*) DESC LIMIT ?",
            (since, limit),
        )
        return [int(row[0]) for row in rows]

    def chats_with_messages(self) -> list[int]:
        rows = self.db.read("SELECT DISTINCT chat_id FROM messages ORDER BY chat_id")
        return [int(row[0]) for row in rows]

    def forget_chat(self, chat_id: int) -> int:
        """Delete the chat's whole index; return how many rows went."""
        return self.db.write("DELETE FROM message_recall WHERE chat_id = ?", (chat_id,))

    def clear(self, chat_id: int | None = None) -> int:
        """Drop the index (of one chat, or all) so it is rebuilt from `messages`."""
        if chat_id is None:
            return self.db.write("DELETE FROM message_recall")
        return self.forget_chat(chat_id)
