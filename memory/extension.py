"""MemoryExtension: memory's hook into the turn loop (context, tools, commands, `remember:`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from core.config import Config
from core.db import Connection
from core.doctor import Check
from core.errors import ToolError
from core.extensions import Command, ContextSection, Extension
from core.tools import Tool
from memory.explicit import parse_explicit
from memory.injection import max_injectable, memories_section
from memory.service import EmbedderFactory, MemoryService
from memory.tools import MemoryTools, access_of

if TYPE_CHECKING:
    from core.turn import TurnContext

logger = logging.getLogger(__name__)

LIST_LIMIT = 50


class MemoryExtension(Extension):
    name = "memory"

    def __init__(
        self, config: Config, conn: Connection, embedder_factory: EmbedderFactory | None = None
    ) -> None:
        self.config = config
        self.service = MemoryService(config, conn, embedder_factory)
        self._tools = MemoryTools(self.service)

    def tools(self) -> list[Tool]:
        return self._tools.tools()

    def commands(self) -> list[Command]:
        return [
            Command("memory", "list what I remember about this chat", self.memory_command),
            Command("forget", "forget a remembered fact: /forget ID", self.forget_command),
        ]

    async def context_sections(self, turn: TurnContext) -> list[ContextSection]:
        memory = self.config.memory
        sections = self.service.files.sections(
            turn.chat.channel,
            turn.chat.external_chat_id,
            memory.file_scope_max_chars,
            memory.file_total_max_chars,
        )
        if memory.token_budget > 0:
            await self.service.ensure_embedder()
            ranked = self.service.rank(
                turn.chat.id, turn.query, max_injectable(memory.token_budget)
            )
            section = memories_section(self.service.conn, turn.chat.id, ranked, memory.token_budget)
            if section is not None:
                sections.append(section)
        return sections

    async def intercept(self, turn: TurnContext) -> str | None:
        fact = parse_explicit(turn.inbound.text)
        if fact is None:
            return None
        if not fact:
            return "Tell me what to remember, e.g. `remember: my sister is called Ana`."
        await self.service.ensure_embedder()
        memory_id, updated = self.service.remember(turn.chat.id, fact)
        return f"Noted. (memory #{memory_id}{', updated' if updated else ''})"

    async def memory_command(self, turn: TurnContext, args: str) -> str:
        memories = self.service.plain_store.list(turn.chat.id)
        if not memories:
            return "I have no memories for this chat yet. Say `remember: …` to add one."
        shown = memories[-LIST_LIMIT:]
        lines = [f"#{m.id} {m.line()}" + (" (global)" if m.chat_id is None else "") for m in shown]
        more = len(memories) - len(shown)
        if more:
            lines.insert(0, f"(the {len(shown)} newest of {len(memories)})")
        return "\n".join(lines)

    async def forget_command(self, turn: TurnContext, args: str) -> str:
        text = args.strip().lstrip("#")
        if not text.isdigit():
            return "Usage: /forget ID (the #number shown by /memory)"
        try:
            memory = self.service.owned(access_of(turn), int(text))
        except ToolError as exc:
            return str(exc)
        self.service.plain_store.delete(memory.id)
        return f"Forgotten: #{memory.id} {memory.content}"

    async def checks(self) -> list[Check]:
        embedder = await self.service.ensure_embedder()
        model = self.config.memory.embedding_model or "all-MiniLM-L6-v2 (bundled)"
        if embedder is None:
            detail = f"{model} could not be loaded; memory ranking uses keywords only"
            checks = [Check("embedding model", False, detail, fatal=False)]
        else:
            queries = getattr(embedder, "query_precision", "float32")
            detail = f"{embedder.model_name} ({embedder.dim} dims, {queries} queries)"
            checks = [Check("embedding model", True, detail)]
        checks.append(self._ranking_check())
        if embedder is not None and self.service.conn.info.vec_loaded:
            missing = self.service.store.count_missing_vectors()
            detail = (
                f"{missing} memories lack a vector; run `mnemo memory reindex`"
                if missing
                else "every memory is embedded"
            )
            checks.append(Check("memory vectors", missing == 0, detail, fatal=False))
        return checks

    def _ranking_check(self) -> Check:
        wanted, mode = self.config.memory.retriever, self.service.mode()
        if mode == wanted:
            return Check("memory ranking", True, mode)
        vec = "loaded" if self.service.conn.info.vec_loaded else "not loaded"
        detail = f"{wanted} unavailable (sqlite-vec {vec}); falling back to {mode}"
        return Check("memory ranking", False, detail, fatal=False)
