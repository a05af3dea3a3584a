"""The SQL of `memory_tombstones`, for `SqliteMemoryStore` (what forgetting leaves behind)."""

from __future__ import annotations

from collections.abc import Sequence

from core.db import Connection
from memory.store import Memory, Tombstone

_COLUMNS = "id, chat_id, memory_id, content, speaker, forgotten_by, forgotten_at"


def bury(conn: Connection, memory: Memory, forgotten_by: str, speaker: str) -> int:
    """Record that `memory` was forgotten (the caller deletes it in the same transaction)."""
    cursor = conn.execute(
        "INSERT INTO memory_tombstones (chat_id, memory_id, content, speaker, forgotten_by)"
        " VALUES (?, ?, ?, ?, ?)",
        (memory.chat_id, memory.id, memory.content, speaker, forgotten_by),
    )
    return int(cursor.lastrowid)


def of_scope(conn: Connection, chat_id: int | None) -> list[Tombstone]:
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM memory_tombstones WHERE chat_id IS ? ORDER BY id", (chat_id,)
    ).fetchall()
    return [Tombstone(*row) for row in rows]


def lift(conn: Connection, tombstone_ids: Sequence[int]) -> None:
    conn.executemany(
        "DELETE FROM memory_tombstones WHERE id = ?", [(int(i),) for i in tombstone_ids]
    )


def forget_scope(conn: Connection, chat_id: int) -> None:
    """A deleted chat's tombstones go with it: no message is left to re-learn from."""
    conn.execute("DELETE FROM memory_tombstones WHERE chat_id = ?", (chat_id,))
