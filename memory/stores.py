"""The memory package's stores for a `Storage`: SQLite or PostgreSQL implementations of
`memory.store.MemoryStore` and `memory.strategies.store.StrategyStore`, and the chats'
AGENTS.md files (`file_memory`). Plugins and CLIs build their stores here, so the engine
named by `[storage] url` is the one they use."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from core.clock import utc_now
from core.storage import Storage
from memory.store import MemoryStore
from memory.strategies.store import Clock, StrategyStore

if TYPE_CHECKING:
    from memory.embeddings import Embedder
    from memory.files import FileMemory


def memory_store(storage: Storage, embedder: Embedder | None = None) -> MemoryStore:
    if storage.postgres is not None:
        from memory.pg_store import PgMemoryStore

        return PgMemoryStore(storage.postgres, embedder)
    from memory.sqlite_store import SqliteMemoryStore

    return SqliteMemoryStore(storage.sqlite_conn, embedder)


def strategy_store(storage: Storage, clock: Clock | None = None) -> StrategyStore:
    """Learned strategies; `clock` (tests, benchmarks) stands in for the time of day."""
    from memory.strategies.strategy_store import DatabaseStrategyStore

    return DatabaseStrategyStore(storage.database, clock or utc_now)


def file_memory(storage: Storage, data_dir: Path) -> FileMemory:
    """AGENTS.md file memory: files under `data_dir` on SQLite, rows on PostgreSQL."""
    from core.stores import file_store
    from memory.files import FileMemory

    return FileMemory(file_store(storage, data_dir))
