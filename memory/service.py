"""MemoryService: one chat-facing facade over file memory, the store, the embedder and ranking.

The embedding model is loaded on first need (not at startup, never at CLI import); the
first time it is available, memories still lacking a vector of it are embedded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from core.config import Config
from core.db import Connection
from core.errors import ToolError
from core.store import Chat
from memory.embeddings import Embedder, load_embedder
from memory.explicit import DUPLICATE_JACCARD, EXPLICIT_CONFIDENCE, guess_category
from memory.files import FileMemory
from memory.rank import RankedMemory, effective_mode, rank_memories
from memory.store import Memory, MemoryStore

logger = logging.getLogger(__name__)

EmbedderFactory = Callable[[], Embedder | None]


@dataclass(frozen=True)
class Access:
    """Who is asking: the chat and whether it may edit global memory."""

    chat: Chat
    control: bool


class MemoryService:
    def __init__(
        self, config: Config, conn: Connection, embedder_factory: EmbedderFactory | None = None
    ) -> None:
        self.config = config
        self.conn = conn
        self.files = FileMemory(config.storage.data_dir)
        self._factory = embedder_factory or (
            lambda: load_embedder(config.memory.embedding_model, config.memory.query_precision)
        )
        self._embedder: Embedder | None = None
        self._loaded = False
        self._store = MemoryStore(conn)

    @property
    def embedder(self) -> Embedder | None:
        """The embedding model, loaded on first use (None when it cannot load)."""
        if not self._loaded:
            self._install(self._factory())
        return self._embedder

    async def ensure_embedder(self) -> Embedder | None:
        """Like `embedder`, but the slow model load runs off the event loop.

        Only the load runs in a thread; database work stays on the caller's thread, so
        the shared connection is never used from two threads at once.
        """
        if not self._loaded:
            loaded = await asyncio.to_thread(self._factory)
            self._install(loaded)
        return self._embedder

    def _install(self, embedder: Embedder | None) -> None:
        if self._loaded:
            return
        self._loaded = True
        self._embedder = embedder
        self._store = MemoryStore(self.conn, embedder)
        if embedder is not None and self.conn.info.vec_loaded:
            done = self._store.embed_missing(limit=1_000_000)
            if done:
                logger.info("embedded %d memories that had no vector", done)

    @property
    def plain_store(self) -> MemoryStore:
        """The store without loading the model (listing, deleting)."""
        return self._store

    @property
    def store(self) -> MemoryStore:
        _ = self.embedder  # make sure the store has the embedder once it is loaded
        return self._store

    def mode(self) -> str:
        """The ranking mode that really runs (the configured one, or bm25 as fallback)."""
        return effective_mode(self.conn, self.config.memory.retriever, self.embedder)

    def rank(self, chat_id: int | None, query: str, k: int) -> list[RankedMemory]:
        return rank_memories(
            self.conn,
            chat_id,
            query,
            k,
            mode=self.config.memory.retriever,
            embedder=self.embedder,
        )

    def owned(self, access: Access, memory_id: int) -> Memory:
        """The memory if this chat may change it; otherwise a ToolError that reveals nothing."""
        memory = self.plain_store.get(memory_id)
        if memory is None or memory.archived:
            raise ToolError(f"no memory #{memory_id} in this chat")
        if memory.chat_id == access.chat.id:
            return memory
        if memory.chat_id is None:
            if access.control:
                return memory
            raise ToolError(f"memory #{memory_id} is global; only a control chat may change it")
        raise ToolError(f"no memory #{memory_id} in this chat")

    def remember(self, chat_id: int, fact: str) -> tuple[int, bool]:
        """Store an explicit fact, updating a near-duplicate; return (id, was_update)."""
        existing = self.store.find_near_duplicate(
            chat_id, fact, min_jaccard=DUPLICATE_JACCARD, method="jaccard"
        )
        if existing is not None:
            self.store.update(existing.id, fact)
            self.store.touch(existing.id, max(existing.confidence, EXPLICIT_CONFIDENCE))
            return existing.id, True
        memory_id = self.store.add(
            chat_id,
            fact,
            guess_category(fact),
            source="explicit",
            confidence=EXPLICIT_CONFIDENCE,
        )
        return memory_id, False
