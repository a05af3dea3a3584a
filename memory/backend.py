"""Where a chat's structured memories are ranked, and where the facts it adds are sent:
`MemoryBackend`. `LocalBackend` is the database (`[memory] backend = "local"`);
`memory.mcp_backend.McpMemoryBackend` asks an MCP memory server and keeps the database
behind it (`"mcp"`).

Every fact is stored in the database first, whatever the backend: it is what `/memory`,
`/forget`, exports and the reflector read, and what ranks when a server fails.
"""

from __future__ import annotations

from typing import Protocol

from core.api import Chat, Check
from memory.keeper import MemoryKeeper
from memory.retrieval import RankedMemory


class MemoryBackend(Protocol):
    """Ranks a chat's memories for a query; hears of each fact the chat adds or changes."""

    async def rank(self, chat: Chat, query: str, k: int) -> list[RankedMemory]:
        """The `k` memories to show for `query`, best first."""
        ...

    async def upsert(self, chat: Chat, memory_id: int) -> None:
        """Memory `memory_id` (already in the database) was added or changed."""
        ...

    def checks(self) -> list[Check]:
        """Lines for `mnemo doctor`."""
        ...


class LocalBackend:
    """The database alone: `memory.retrieval.rank_memories` over the chat's memories."""

    def __init__(self, keeper: MemoryKeeper) -> None:
        self.keeper = keeper

    async def rank(self, chat: Chat, query: str, k: int) -> list[RankedMemory]:
        return self.keeper.rank(chat.id, query, k)

    async def upsert(self, chat: Chat, memory_id: int) -> None:
        """Nothing to do: the database already holds it."""

    def checks(self) -> list[Check]:
        return []
