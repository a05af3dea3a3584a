"""ReflectorCursor: per chat, the id of the last message the reflector has handled."""

from __future__ import annotations

from collections.abc import Sequence

from core.db import Connection

_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"


class ReflectorCursor:
    """Reads and moves `memory_reflector_state`; every query is an index lookup per chat."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def position(self, chat_id: int) -> int:
        row = self.conn.execute(
            "SELECT last_message_id FROM memory_reflector_state WHERE chat_id = ?", (chat_id,)
        ).fetchone()
        return int(row[0]) if row else 0

    def pending_chats(self, chat_ids: Sequence[int] | None = None) -> list[int]:
        """Chats with messages newer than their cursor, oldest cursor first.

        `max(id)` per chat is answered from the (chat_id, id) index, so this costs one
        lookup per chat whatever the history length.
        """
        where = ""
        params: tuple[int, ...] = ()
        if chat_ids is not None:
            if not chat_ids:
                return []
            where = f"WHERE c.id IN ({', '.join('?' * len(chat_ids))})"
            params = tuple(chat_ids)
        rows = self.conn.execute(
            "SELECT c.id, coalesce(s.last_message_id, 0) AS done,"
            " (SELECT max(m.id) FROM messages m WHERE m.chat_id = c.id) AS newest"
            f" FROM chats c LEFT JOIN memory_reflector_state s ON s.chat_id = c.id {where}"
            " ORDER BY coalesce(s.updated_at, ''), c.id",
            params,
        ).fetchall()
        return [int(row[0]) for row in rows if row[2] is not None and row[2] > row[1]]

    def advance(self, chat_id: int, expected: int, new: int) -> bool:
        """Move the cursor from `expected` to `new`; False if someone else moved it first.

        Call inside the transaction that stores the pass's memories.
        """
        if expected == 0:
            self.conn.execute(
                "INSERT OR IGNORE INTO memory_reflector_state (chat_id, last_message_id)"
                " VALUES (?, 0)",
                (chat_id,),
            )
        cursor = self.conn.execute(
            f"UPDATE memory_reflector_state SET last_message_id = ?, updated_at = {_NOW}"
            " WHERE chat_id = ? AND last_message_id = ?",
            (new, chat_id, expected),
        )
        return int(cursor.rowcount) == 1

    def reset(self, chat_id: int, position: int = 0) -> None:
        """Set the cursor (tests, benchmarks, and re-reflecting a chat from scratch)."""
        self.conn.execute(
            "INSERT INTO memory_reflector_state (chat_id, last_message_id) VALUES (?, ?)"
            f" ON CONFLICT (chat_id) DO UPDATE SET last_message_id = excluded.last_message_id,"
            f" updated_at = {_NOW}",
            (chat_id, position),
        )
