"""An MCP server as the memory backend (`[memory] backend = "mcp"`, after MicroClaw's
`memory_query` + `memory_upsert`).

- Query: `<mcp_query_tool>(query, chat, k)` answers rows in the server's order, which is
  kept. A row is a JSON object with `content` (or `text`), optional `category` and `id`;
  the answer is a JSON list of them, or an object holding one under `memories`, `results`
  or `rows`. A row whose `id` is a memory of this chat (or a global one) is that memory;
  an integer `id` naming no such memory (forgotten, deleted, another chat's) is dropped,
  so what a person forgot never comes back through the server; a row without one is
  shown as the server wrote it.
- Upsert: `<mcp_upsert_tool>(chat, id, content, category)` after each fact a chat adds or
  corrects (`remember:`, the memory tools), once it is in the database; and before each
  query, for every memory of the chat that changed since the bot started or the last sync
  (the reflector's facts), read from the database's change log. A global memory is sent
  with `chat = "*"`. A memory already sent with the same text is not sent again.
- When the server is down, slow (`mcp_timeout_s`) or answers an error, the database ranks
  instead: logged once per outage, counted, and shown by `mnemo doctor`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from core.api import Chat, Check
from core.clock import now_iso
from core.config import MemoryConfig
from core.errors import ToolError
from core.mcp.connection import McpServer, McpTool
from memory.keeper import MemoryKeeper
from memory.retrieval import RankedMemory
from memory.store import CATEGORIES, Marks, Memory

logger = logging.getLogger(__name__)

ServerLookup = Callable[[], McpServer | None]
ROW_KEYS = ("memories", "results", "rows")


class McpMemoryBackend:
    """The MCP memory server ranks; the database ranks whenever the server cannot."""

    def __init__(self, config: MemoryConfig, keeper: MemoryKeeper, lookup: ServerLookup) -> None:
        self.config = config
        self.keeper = keeper
        self.lookup = lookup
        self.failing = ""  # why the last query fell back ("" while the server answers)
        self.fallbacks = 0
        self.upsert_failures = 0
        self.last_upsert_error = ""
        self._sent: dict[int, str] = {}  # memory id → the text the server has
        self._start = keeper.store.change_log_end()  # changes after this are synced
        self._marks: dict[int, Marks] = {}  # per chat: the change log synced through

    async def rank(self, chat: Chat, query: str, k: int) -> list[RankedMemory]:
        if k <= 0 or not query.strip():
            return []
        await self.sync(chat)
        try:
            text = await self._call(
                self.config.mcp_query_tool, {"query": query, "chat": chat.key, "k": k}
            )
            ranked = self._rows(chat, parse_rows(text))[:k]
        except ToolError as exc:
            self._fell_back(str(exc))
            return self.keeper.rank(chat.id, query, k)
        if self.failing:
            logger.info("memory server %s answers again", self.config.mcp_server)
            self.failing = ""
        return ranked

    async def upsert(self, chat: Chat, memory_id: int) -> None:
        memory = self.keeper.store.get(memory_id)
        if memory is not None:
            await self._send(chat, memory)

    async def sync(self, chat: Chat) -> None:
        """Send the chat's (and global) memories that changed since the last sync; the
        marks move on only when every one of them reached the server."""
        marks = self._marks.get(chat.id, Marks(self._start, self._start))
        changes = self.keeper.store.changes_since(chat.id, marks)
        if changes is None:
            return
        memories = self.keeper.store.by_ids(sorted(changes.memory_ids))
        sent = [
            await self._send(chat, memory)
            for memory in memories.values()
            if not memory.archived and memory.chat_id in (chat.id, None)
        ]
        if all(sent):
            self._marks[chat.id] = changes.marks

    async def _send(self, chat: Chat, memory: Memory) -> bool:
        """Upsert one memory unless the server has it as it is; False when that failed."""
        if self._sent.get(memory.id) == memory.content:
            return True
        key = chat.key if memory.chat_id is not None else "*"
        args = {"chat": key, "id": str(memory.id), "content": memory.content,
                "category": memory.category}  # fmt: skip
        try:
            await self._call(self.config.mcp_upsert_tool, args)
        except ToolError as exc:
            self.upsert_failures += 1
            self.last_upsert_error = str(exc)
            logger.warning("memory #%d not sent to the memory server %s (%s); it is kept in the "
                           "database", memory.id, self.config.mcp_server, exc)  # fmt: skip
            return False
        self._sent[memory.id] = memory.content
        return True

    async def _call(self, tool: str, args: dict[str, Any]) -> str:
        server = self.lookup()
        if server is None:
            raise ToolError(f"no MCP server named {self.config.mcp_server} is running")
        if server.state != "up":
            raise ToolError(f"MCP server {server.name} is {server.status()}")
        remote = McpTool(f"{server.name}__{tool}", tool, "", {})
        try:
            async with asyncio.timeout(self.config.mcp_timeout_s):
                return await server.call(remote, args)
        except TimeoutError:
            raise ToolError(
                f"{tool} gave no answer within {self.config.mcp_timeout_s:g} s"
            ) from None

    def _fell_back(self, why: str) -> None:
        self.fallbacks += 1
        if not self.failing:
            logger.warning("memory server %s failed (%s); the database ranks memories until it "
                           "answers again", self.config.mcp_server, why)  # fmt: skip
        self.failing = why

    def _rows(self, chat: Chat, rows: list[dict[str, Any]]) -> list[RankedMemory]:
        """The server's rows as memories, in its order (the first scores highest)."""
        memories: list[Memory] = []
        ids = [int(row["id"]) for row in rows if str(row.get("id", "")).strip().isdigit()]
        known = self.keeper.store.by_ids(ids) if ids else {}
        for row in rows:
            memory = row_memory(chat, row, known)
            if memory is not None:
                memories.append(memory)
        return [RankedMemory(memory, float(len(memories) - n)) for n, memory in enumerate(memories)]

    def checks(self) -> list[Check]:
        name = f"memory backend (mcp server {self.config.mcp_server})"
        server = self.lookup()
        state = server.status() if server is not None else "not running here"
        notes = []
        if self.failing:
            notes.append(f"the database ranks since: {self.failing}")
        if self.fallbacks:
            notes.append(f"{self.fallbacks} queries answered by the database")
        if self.upsert_failures:
            notes.append(f"{self.upsert_failures} facts not sent ({self.last_upsert_error})")
        detail = "; ".join([f"server {state}", *notes])
        return [Check(name, not notes, detail, fatal=False)]


def parse_rows(text: str) -> list[dict[str, Any]]:
    """The rows of a query's answer: one JSON document, or one JSON row per line."""
    try:
        found: Any = json.loads(text)
    except ValueError:
        try:
            found = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError:
            raise ToolError("the memory server's answer is not JSON rows") from None
    if isinstance(found, dict):
        found = next((found[key] for key in ROW_KEYS if isinstance(found.get(key), list)), [found])
    if not isinstance(found, list):
        raise ToolError("the memory server's answer is not a list of rows")
    return [row for row in found if isinstance(row, dict)]


def row_memory(chat: Chat, row: dict[str, Any], known: dict[int, Memory]) -> Memory | None:
    """A row as a memory: the local one its id names, itself when it has no id, or None."""
    raw_id = str(row.get("id", "")).strip()
    if raw_id.isdigit():
        memory = known.get(int(raw_id))
        if memory is None or memory.archived or memory.chat_id not in (chat.id, None):
            return None
        expired = memory.expires_at is not None and memory.expires_at <= now_iso()
        return None if expired else memory
    content = str(row.get("content") or row.get("text") or "").strip()
    if not content:
        return None
    category = str(row.get("category") or "KNOWLEDGE").upper()
    category = category if category in CATEGORIES else "KNOWLEDGE"
    return Memory(0, chat.id, content, category, 1.0, "mcp", "", "", "", False, None, None)
