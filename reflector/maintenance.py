"""Memory upkeep run once per reflector pass: archive stale, delete expired, embed missing,
prune the change log, save the ranking data of the chats this process holds where the
saved copy is behind (`memory.rank_snapshots`)."""

from __future__ import annotations

from dataclasses import dataclass

from memory.rank_snapshots import checkpoint_held
from memory.store import MemoryStore

STALE_DAYS = 30
BATCH = 500
EMBED_PER_PASS = 64


@dataclass(frozen=True)
class MaintenanceReport:
    archived: int
    deleted: int
    embedded: int
    log_pruned: int = 0  # rows dropped from the memory change log
    snapshots_saved: int = 0  # chats' ranking data saved for the next start

    def summary(self) -> str:
        return (
            f"maintenance: {self.archived} archived (low confidence, unseen "
            f"{STALE_DAYS} days), {self.deleted} expired deleted, {self.embedded} embedded"
            + (f", {self.log_pruned} change-log rows pruned" if self.log_pruned else "")
            + (f", {self.snapshots_saved} ranking snapshots saved" if self.snapshots_saved else "")
        )


def archive_stale(memories: MemoryStore, confidence_floor: float) -> int:
    """Archive active memories below the floor that nobody has seen for 30 days."""
    ids = memories.stale_ids(confidence_floor, STALE_DAYS, BATCH)
    with memories.transaction():
        for memory_id in ids:
            memories.archive(memory_id)
    return len(ids)


def delete_expired(memories: MemoryStore) -> int:
    """Hard-delete memories past `expires_at` (the only rows the reflector deletes)."""
    ids = memories.expired_ids(BATCH)
    with memories.transaction():
        for memory_id in ids:
            memories.delete(memory_id)
    return len(ids)


def maintain(
    memories: MemoryStore, confidence_floor: float, embedding_store: MemoryStore | None
) -> MaintenanceReport:
    """One round of upkeep; the embedding step is bounded so a pass stays short.

    `embedding_store` (with the embedder) is only needed when `memories.has_unembedded()`.
    """
    archived = archive_stale(memories, confidence_floor)
    deleted = delete_expired(memories)
    embedded = 0
    if embedding_store is not None:
        embedded = embedding_store.embed_missing(limit=EMBED_PER_PASS)
    pruned = memories.prune_change_log()
    saved = checkpoint_held(embedding_store or memories)
    return MaintenanceReport(archived, deleted, embedded, pruned, saved)
