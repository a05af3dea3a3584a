"""The SQL of `memory_tombstones` (what forgetting leaves behind), for the memory store."""

from __future__ import annotations

from collections.abc import Sequence

from core.storage.database import Database
from memory.store import Memory, Tombstone

_COLUMNS = "id, chat_id, memory_id, content, speaker, forgotten_by, forgotten_at"


def bury(db: Database, memory: Memory, forgotten_by: str, speaker: str) -> int:
    """Record that `memory` was forgotten (the caller deletes it in the same transaction)."""
    row = db.read_one(
        "INSERT INTO memory_tombstones (chat_id, memory_id, content, speaker, forgotten_by)"
        " VALUES (?, ?, ?, ?, ?) RETURNING id",
        (memory.chat_id, memory.id, memory.content, speaker, forgotten_by),
    )
    assert row is not None
    return int(row[0])


def of_scope(db: Database, chat_id: int | None) -> list[Tombstone]:
    where, params = ("chat_id IS NULL", ()) if chat_id is None else ("chat_id = ?", (chat_id,))
    rows = db.read(f"SELECT {_COLUMNS} FROM memory_tombstones WHERE {where} ORDER BY id", params)
    return [Tombstone(*row) for row in rows]


def lift(db: Database, tombstone_ids: Sequence[int]) -> None:
    if not tombstone_ids:
        return
    in_ids, params = db.dialect.in_values("id", [int(i) for i in tombstone_ids])
    db.write(f"DELETE FROM memory_tombstones WHERE {in_ids}", params)


def forget_scope(db: Database, chat_id: int) -> None:
    """A deleted chat's tombstones go with it: no message is left to re-learn from."""
    db.write("DELETE FROM memory_tombstones WHERE chat_id = ?", (chat_id,))
