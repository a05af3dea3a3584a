"""Memory upkeep run once per reflector pass: archive stale, delete expired, embed missing,
prune the change log."""

from __future__ import annotations

from dataclasses import dataclass

from core.db import transaction
from memory.keyword_cache import prune_log
from memory.store import NOW_SQL, MemoryStore

STALE_DAYS = 30
BATCH = 500
EMBED_PER_PASS = 64


@dataclass(frozen=True)
class MaintenanceReport:
    archived: int
    deleted: int
    embedded: int
    log_pruned: int = 0  # rows dropped from the memory change log

    def summary(self) -> str:
        return (
            f"maintenance: {self.archived} archived (low confidence, unseen "
            f"{STALE_DAYS} days), {self.deleted} expired deleted, {self.embedded} embedded"
            + (f", {self.log_pruned} change-log rows pruned" if self.log_pruned else "")
        )


def archive_stale(memories: MemoryStore, confidence_floor: float) -> int:
    """Archive active memories below the floor that nobody has seen for 30 days."""
    rows = memories.conn.execute(
        "SELECT id FROM memories WHERE archived = 0 AND confidence < ?"
        f" AND last_seen_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-{STALE_DAYS} days')"
        " LIMIT ?",
        (confidence_floor, BATCH),
    ).fetchall()
    with transaction(memories.conn):
        for (memory_id,) in rows:
            memories.archive(memory_id)
    return len(rows)


def delete_expired(memories: MemoryStore) -> int:
    """Hard-delete memories past `expires_at` (the only rows the reflector deletes)."""
    rows = memories.conn.execute(
        f"SELECT id FROM memories WHERE expires_at IS NOT NULL AND expires_at <= {NOW_SQL} LIMIT ?",
        (BATCH,),
    ).fetchall()
    with transaction(memories.conn):
        for (memory_id,) in rows:
            memories.delete(memory_id)
    return len(rows)


def needs_embedding(memories: MemoryStore) -> bool:
    """Whether some active memory has no vector yet (cheap: stops at the first)."""
    row = memories.conn.execute(
        "SELECT 1 FROM memories WHERE archived = 0 AND embedding_model IS NULL LIMIT 1"
    ).fetchone()
    return row is not None


def maintain(
    memories: MemoryStore, confidence_floor: float, embedding_store: MemoryStore | None
) -> MaintenanceReport:
    """One round of upkeep; the embedding step is bounded so a pass stays short.

    `embedding_store` (with the embedder) is only needed when `needs_embedding()`.
    """
    archived = archive_stale(memories, confidence_floor)
    deleted = delete_expired(memories)
    embedded = 0
    if embedding_store is not None:
        embedded = embedding_store.embed_missing(limit=EMBED_PER_PASS)
    return MaintenanceReport(archived, deleted, embedded, prune_log(memories.conn))
