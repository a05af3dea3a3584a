"""The SQL of `memory_rank_snapshots` (persisted ranking data, migration m0023), for the
memory store: one blob per chat scope and kind, with the change-log marks it is current to."""

from __future__ import annotations

from core.storage.database import Database
from memory.store import Marks, RankSnapshot


def load(db: Database, scope: int, kind: str) -> RankSnapshot | None:
    row = db.read_one(
        "SELECT chat_seq, shared_seq, model, data FROM memory_rank_snapshots"
        " WHERE scope = ? AND kind = ?",
        (scope, kind),
        binary=True,  # tens of MB at 100,000 memories
    )
    if row is None:
        return None
    return RankSnapshot(Marks(int(row[0]), int(row[1])), str(row[2]), bytes(row[3]))


def marks_of(db: Database, scope: int, kind: str) -> Marks | None:
    """The marks of the saved snapshot, without reading its blob."""
    row = db.read_one(
        "SELECT chat_seq, shared_seq FROM memory_rank_snapshots WHERE scope = ? AND kind = ?",
        (scope, kind),
    )
    return None if row is None else Marks(int(row[0]), int(row[1]))


def save(db: Database, scope: int, kind: str, snapshot: RankSnapshot) -> None:
    db.write(
        "INSERT INTO memory_rank_snapshots (scope, kind, chat_seq, shared_seq, model, data)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (scope, kind) DO UPDATE SET"
        " chat_seq = excluded.chat_seq, shared_seq = excluded.shared_seq,"
        " model = excluded.model, data = excluded.data",
        (scope, kind, snapshot.marks.chat, snapshot.marks.shared, snapshot.model, snapshot.data),
    )


def drop(db: Database, scope: int | None) -> int:
    """Drop the snapshots of one scope (None: of every scope); how many went."""
    if scope is None:
        return db.write("DELETE FROM memory_rank_snapshots")
    return db.write("DELETE FROM memory_rank_snapshots WHERE scope = ?", (scope,))


def scopes(db: Database) -> list[int]:
    """The scopes that have a snapshot saved."""
    return [int(row[0]) for row in db.read("SELECT DISTINCT scope FROM memory_rank_snapshots")]
