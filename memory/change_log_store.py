"""The SQL of `memory_changes` (the memory change log written by the triggers of migrations
m0006 / m0007), written once for both engines on the `Database` seam: where the log ends,
what changed in a chat's scope since given marks, pruning, and a deleted chat's entries.

On PostgreSQL the log's writers queue on a transaction-level advisory lock (see m0006);
pruning and dropping a scope take it too. SQLite's `BEGIN IMMEDIATE` already makes every
other writer wait.
"""

from __future__ import annotations

from core.storage.database import Database
from memory.store import GLOBAL_SCOPE, PRUNED_SCOPE, Changes, Marks, changes_from_log, scope_of
from migrations.m0006_memory_changes import MEMORY_CHANGES_LOCK

LOG_PRUNE_AT = 100_000  # the change log is pruned once it holds this many rows ...
LOG_KEEP = 50_000  # ... down to the newest this many


def _lock(db: Database) -> None:
    """Queue behind other writers of the log until commit (PostgreSQL; see m0006)."""
    if db.dialect.row_locks:
        db.read_one("SELECT pg_advisory_xact_lock(?)", (MEMORY_CHANGES_LOCK,))


def log_end(db: Database) -> int:
    """The newest log entry's seq (0 for an empty log)."""
    row = db.read_one("SELECT coalesce(max(seq), 0) FROM memory_changes")
    assert row is not None
    return int(row[0])


def changes_since(db: Database, chat_id: int | None, marks: Marks) -> Changes | None:
    """What changed in the chat's and the global scope after `marks` (one statement); None
    when nothing did."""
    scope = scope_of(chat_id)
    oldest = min(marks.chat, marks.shared)
    rows = db.read(
        "SELECT seq, scope, memory_id FROM memory_changes"
        " WHERE (scope = ? AND seq > ?) OR (scope = ? AND seq > ?) OR (scope = ? AND seq > ?)",
        (scope, marks.chat, GLOBAL_SCOPE, marks.shared, PRUNED_SCOPE, oldest),
    )
    return changes_from_log(rows, scope, marks)


def prune_log(db: Database) -> int:
    """Drop the oldest rows once there are LOG_PRUNE_AT; return how many went.

    A marker row records how far the log was pruned, so lists older than that are rebuilt.
    """
    total = db.read_one("SELECT count(*) FROM memory_changes")
    if total is None or int(total[0]) < LOG_PRUNE_AT:
        return 0
    with db.transaction():
        _lock(db)
        cutoff = db.read_one(
            "SELECT seq FROM memory_changes ORDER BY seq DESC LIMIT 1 OFFSET ?", (LOG_KEEP,)
        )
        assert cutoff is not None
        gone = db.write("DELETE FROM memory_changes WHERE seq <= ?", (int(cutoff[0]),))
        db.write(
            "INSERT INTO memory_changes (scope, memory_id) VALUES (?, ?)",
            (PRUNED_SCOPE, int(cutoff[0])),
        )
    return gone


def forget_scope_log(db: Database, chat_id: int) -> None:
    """Drop a deleted chat's entries, leaving a pruned-log marker in their place: in-process
    keyword lists and vectors (of any process) older than the marker are rebuilt from the
    rows, so none keeps a deleted memory, and no entry names the chat any more."""
    with db.transaction():
        _lock(db)
        through = log_end(db)
        db.write("DELETE FROM memory_changes WHERE scope = ?", (scope_of(chat_id),))
        db.write(
            "INSERT INTO memory_changes (scope, memory_id) VALUES (?, ?)", (PRUNED_SCOPE, through)
        )
