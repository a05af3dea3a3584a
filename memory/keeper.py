"""MemoryKeeper: what the memory package offers a chat, over file memory, the store and ranking.

The embedding model is loaded by `load_embedder()`, explicitly (the extension's `start`,
a CLI command): reading the keeper never loads a model or embeds anything. Once a model is
loaded, memories still lacking a vector of it are embedded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from core.api import Chat
from core.config import Config
from core.errors import ToolError
from memory.embeddings import Embedder, load_embedder
from memory.explicit import DUPLICATE_JACCARD, EXPLICIT_CONFIDENCE, guess_category
from memory.files import FileMemory
from memory.quality import check_fact
from memory.retrieval import RankedMemory, effective_mode, rank_memories
from memory.store import Memory, MemoryStore

logger = logging.getLogger(__name__)

EmbedderFactory = Callable[[], Embedder | None]

# What to do about each refusal of the quality gate (by the start of its reason).
REFUSAL_HINTS = {
    "too short": "say a little more",
    "too long": "keep one fact under 240 characters",
    "instruction": "state it as a fact about the user (e.g. 'prefers short answers')",
    "contains a secret": "passwords, keys, tokens and card numbers are never stored",
    "hedged": "state it without 'maybe' or 'I think'",
    "small talk": "greetings and thanks are not remembered",
}


class FactRefused(ToolError):
    """The quality gate refused a fact: `why` says why and what to do instead."""

    def __init__(self, reason: str) -> None:
        starts = REFUSAL_HINTS.items()
        hint = next((text for start, text in starts if reason.startswith(start)), "")
        self.why = f"{reason}; {hint}" if hint else reason
        super().__init__(f"not saved: {self.why}")


@dataclass(frozen=True)
class Access:
    """Who is asking: the chat and whether it may edit global memory."""

    chat: Chat
    control: bool


class MemoryKeeper:
    def __init__(
        self, config: Config, store: MemoryStore, embedder_factory: EmbedderFactory | None = None
    ) -> None:
        self.config = config
        self.files = FileMemory(config.storage.data_dir)
        self._factory = embedder_factory or (
            lambda: load_embedder(config.memory.embedding_model, config.memory.query_precision)
        )
        self._loaded = False
        self.store = store

    @property
    def embedder(self) -> Embedder | None:
        """The embedding model if it is loaded (None before `load_embedder()` or if it failed)."""
        return self.store.embedder

    @property
    def loaded(self) -> bool:
        return self._loaded

    async def load_embedder(self) -> Embedder | None:
        """Load the embedding model off the event loop (once); embed memories lacking a vector.

        Only the load runs in a thread; database work stays on the caller's thread, so
        the shared connection is never used from two threads at once.
        """
        if not self._loaded:
            embedder = await asyncio.to_thread(self._factory)
            self._install(embedder)
        return self.store.embedder

    def load_embedder_now(self) -> Embedder | None:
        """`load_embedder()` for synchronous callers (CLI commands)."""
        if not self._loaded:
            self._install(self._factory())
        return self.store.embedder

    def _install(self, embedder: Embedder | None) -> None:
        if self._loaded:
            return
        self._loaded = True
        self.store = self.store.with_embedder(embedder)
        if embedder is not None and self.store.vectors_enabled:
            self.store.prepare_vectors()
            done = self.store.embed_missing(limit=1_000_000)
            if done:
                logger.info("embedded %d memories that had no vector", done)

    def mode(self) -> str:
        """The ranking mode that really runs (the configured one, or bm25 as fallback)."""
        return effective_mode(self.store, self.config.memory.retriever)

    def rank(self, chat_id: int | None, query: str, k: int) -> list[RankedMemory]:
        return rank_memories(self.store, chat_id, query, k, mode=self.config.memory.retriever)

    def owned(self, access: Access, memory_id: int) -> Memory:
        """The memory if this chat may change it; otherwise a ToolError that reveals nothing."""
        memory = self.store.get(memory_id)
        if memory is None or memory.archived:
            raise ToolError(f"no memory #{memory_id} in this chat")
        if memory.chat_id == access.chat.id:
            return memory
        if memory.chat_id is None:
            if access.control:
                return memory
            raise ToolError(f"memory #{memory_id} is global; only a control chat may change it")
        raise ToolError(f"no memory #{memory_id} in this chat")

    def checked(self, fact: str) -> str:
        """`fact` as the quality gate (the reflector's) normalises it; `FactRefused` when
        the gate refuses it."""
        verdict = check_fact(fact)
        if not verdict.accepted:
            raise FactRefused(verdict.reason)
        return verdict.content

    def remember(self, chat_id: int, fact: str) -> tuple[int, bool]:
        """Store an explicit fact that passes the gate, updating a near-duplicate; return
        (id, was_update). A refused fact raises `FactRefused` and nothing is stored."""
        fact = self.checked(fact)
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
