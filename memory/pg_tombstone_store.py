"""The SQL of `memory_tombstones` on PostgreSQL, for `PgMemoryStore` (as `tombstone_store`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memory.store import Memory, Tombstone

_COLUMNS = "id, chat_id, memory_id, content, speaker, forgotten_by, forgotten_at"


def bury(conn: Any, memory: Memory, forgotten_by: str, speaker: str) -> int:
    """Record that `memory` was forgotten (the caller deletes it in the same transaction)."""
    row = conn.execute(
        "INSERT INTO memory_tombstones (chat_id, memory_id, content, speaker, forgotten_by)"
        " VALUES (%s, %s, %s, %s, %s) RETURNING id",
        (memory.chat_id, memory.id, memory.content, speaker, forgotten_by),
    ).fetchone()
    return int(row[0])


def of_scope(conn: Any, chat_id: int | None) -> list[Tombstone]:
    where, params = ("chat_id IS NULL", ()) if chat_id is None else ("chat_id = %s", (chat_id,))
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM memory_tombstones WHERE {where} ORDER BY id", params
    ).fetchall()
    return [Tombstone(*row) for row in rows]


def lift(conn: Any, tombstone_ids: Sequence[int]) -> None:
    conn.execute(
        "DELETE FROM memory_tombstones WHERE id = ANY(%s)", ([int(i) for i in tombstone_ids],)
    )


def forget_scope(conn: Any, chat_id: int) -> None:
    """A deleted chat's tombstones go with it."""
    conn.execute("DELETE FROM memory_tombstones WHERE chat_id = %s", (chat_id,))
