"""`RecallStore`: the SQL of the episodic recall index (`message_recall`, migrations m0021
and m0026), written once for both engines on the `Database` seam.

The index covers a chat's user and assistant messages with text, compacted ones included;
the text, speaker and date are read from `messages`, the vectors from `message_recall`:
the whole text's, and its sentences' packed in one value (`memory.sentence_vectors`).
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
    sentences: bytes | None = None  # packed sentence vectors; b"": none needed; None: not made


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
    packed = row[6] if with_vector else None
    return RecallRow(
        int(row[0]),
        str(row[1]),
        str(row[2]),
        str(row[3]),
        str(row[4]),
        bytes(blob) if blob is not None else None,
        bytes(packed) if packed is not None else None,
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
        self,
        chat_id: int,
        rows: Sequence[RecallRow],
        vectors: Sequence[bytes | None],
        model: str,
        sentences: Sequence[bytes | None] | None = None,
    ) -> None:
        """Index `rows` with their vectors (None: no vector) and packed sentence vectors
        (None: not made); a row already there is kept."""
        packed = sentences if sentences is not None else [None] * len(rows)
        self.db.write_many(
            "INSERT INTO message_recall (message_id, chat_id, embedding, model, sentence_vectors)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (message_id) DO NOTHING",
            [
                (row.message_id, chat_id, vector, model if vector is not None else "", units)
                for row, vector, units in zip(rows, vectors, packed, strict=True)
            ],
        )

    def without_sentences(self, chat_id: int, limit: int) -> list[RecallRow]:
        """The chat's indexed messages with a vector whose sentence vectors were never made
        (indexed before m0026), oldest first, without vectors."""
        rows = self.db.read(
            f"SELECT {_ROW} FROM message_recall r JOIN messages m ON m.id = r.message_id"
            " WHERE r.chat_id = ? AND r.embedding IS NOT NULL AND r.sentence_vectors IS NULL"
            " ORDER BY r.message_id LIMIT ?",
            (chat_id, limit),
        )
        return [_row(row, False) for row in rows]

    def set_sentences(self, packed: Sequence[tuple[int, bytes]]) -> None:
        """Store the packed sentence vectors of these (message id, value) pairs."""
        self.db.write_many(
            "UPDATE message_recall SET sentence_vectors = ? WHERE message_id = ?",
            [(value, message_id) for message_id, value in packed],
        )

    def rows(self, chat_id: int, after_id: int = 0, sentences: bool = False) -> list[RecallRow]:
        """The chat's indexed messages newer than `after_id`, with their vectors (and their
        packed sentence vectors if `sentences`; a search reads those of its candidates
        alone, `sentence_vectors`), oldest first."""
        packed = "r.sentence_vectors" if sentences else "NULL"
        rows = self.db.read(
            f"SELECT {_ROW}, r.embedding, {packed} FROM message_recall r JOIN messages m"
            " ON m.id = r.message_id WHERE r.chat_id = ? AND r.message_id > ?"
            " ORDER BY r.message_id",
            (chat_id, after_id),
        )
        return [_row(row, True) for row in rows]

    def sentence_vectors(self, chat_id: int, message_ids: Sequence[int]) -> dict[int, bytes | None]:
        """The packed sentence vectors of these indexed messages of the chat (None: not made
        yet; b"": none needed), in one statement; ids not indexed in the chat are absent."""
        if not message_ids:
            return {}
        in_ids, params = self.db.dialect.in_values("message_id", [int(i) for i in message_ids])
        rows = self.db.read(
            "SELECT message_id, sentence_vectors FROM message_recall"
            f" WHERE chat_id = ? AND {in_ids}",
            (chat_id, *params),
        )
        return {int(row[0]): bytes(row[1]) if row[1] is not None else None for row in rows}

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
