"""The memory package's stores for a `Storage`: `memory.store.MemoryStore` and
`memory.strategies.store.StrategyStore` (one implementation each over its `Database`), and
the chats' AGENTS.md files (`file_memory`). Plugins and CLIs build their stores here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from core.clock import utc_now
from core.storage.engine import Storage
from memory.store import MemoryStore
from memory.strategies.store import Clock, StrategyStore

if TYPE_CHECKING:
    from core.config import Config
    from memory.embeddings import Embedder
    from memory.files import FileMemory
    from memory.keeper import MemoryKeeper
    from memory.recall import Recaller


def memory_store(storage: Storage, embedder: Embedder | None = None) -> MemoryStore:
    from memory.memory_store import DatabaseMemoryStore

    return DatabaseMemoryStore(storage.database, embedder)


def strategy_store(storage: Storage, clock: Clock | None = None) -> StrategyStore:
    """Learned strategies; `clock` (tests, benchmarks) stands in for the time of day."""
    from memory.strategies.strategy_store import DatabaseStrategyStore

    return DatabaseStrategyStore(storage.database, clock or utc_now)


def file_memory(storage: Storage, data_dir: Path) -> FileMemory:
    """AGENTS.md file memory: files under `data_dir` on SQLite, rows on PostgreSQL."""
    from core.storage.stores import file_store
    from memory.files import FileMemory

    return FileMemory(file_store(storage, data_dir))


def recaller(storage: Storage, config: Config, keeper: MemoryKeeper) -> Recaller:
    """The episodic recall of the chats' messages, with the keeper's embedder and tombstones."""
    from zoneinfo import ZoneInfo

    from memory.recall import Recaller, RecallSources
    from memory.recall_store import RecallStore
    from memory.warm_up import warm_memories

    sources = RecallSources(
        embedder=lambda: keeper.embedder,
        tombstones=lambda chat_id: keeper.store.tombstones(chat_id),
        warm=lambda chat_id: warm_memories(keeper.store, chat_id),
    )
    return Recaller(RecallStore(storage.database), sources, ZoneInfo(config.memory.timezone))
