"""MemoryExtension: memory's hook into the turn loop (context, tools, commands, `remember:`)."""

from __future__ import annotations

import logging

from core.api import (
    Chat,
    ChatDataSection,
    Check,
    Command,
    ContextSection,
    Extension,
    Tool,
    TurnContext,
)
from core.config import Config
from core.errors import InputError, ToolError
from memory.chat_data import export_memory, forget_memory, memory_counts
from memory.daily_notes import DailyNotes, today
from memory.explicit import parse_explicit
from memory.files import FileMemory
from memory.injection import max_injectable, memories_section
from memory.keeper import USAGE, EmbedderFactory, FactRefused, MemoryKeeper
from memory.store import MemoryStore, parse_memory_id
from memory.tools import MemoryTools

logger = logging.getLogger(__name__)

LIST_LIMIT = 50


class MemoryExtension(Extension):
    name = "memory"

    def __init__(
        self,
        config: Config,
        store: MemoryStore,
        embedder_factory: EmbedderFactory | None = None,
        files: FileMemory | None = None,
    ) -> None:
        self.config = config
        self.keeper = MemoryKeeper(config, store, embedder_factory, files)
        self._tools = MemoryTools(self.keeper)

    async def start(self) -> None:
        """Load the embedding model before the first message (not on it)."""
        await self.keeper.load_embedder()

    def tools(self) -> list[Tool]:
        return self._tools.tools()

    def commands(self) -> list[Command]:
        return [
            Command("memory", "list what I remember about this chat", self.memory_command),
            Command("forget", "forget a remembered fact: /forget ID", self.forget_command),
        ]

    def help_lines(self) -> list[str]:
        return [
            "remember: FACT - I store FACT as a memory right away, without asking the model"
            " (also `remember that …`, `memo: …`); /memory lists them, /forget ID removes one",
        ]

    async def context_sections(self, turn: TurnContext) -> list[ContextSection]:
        memory = self.config.memory
        sections = self.keeper.files.sections(
            turn.chat.channel,
            turn.chat.external_chat_id,
            memory.file_scope_max_chars,
            memory.file_total_max_chars,
        )
        chat = turn.chat
        daily = DailyNotes(self.keeper.files, chat.channel, chat.external_chat_id).section(today())
        if daily is not None:
            sections.append(daily)
        if memory.token_budget > 0:
            ranked = self.keeper.rank(turn.chat.id, turn.query, max_injectable(memory.token_budget))
            section = memories_section(self.keeper.store, turn.chat.id, ranked, memory.token_budget)
            if section is not None:
                sections.append(section)
        return sections

    async def intercept(self, turn: TurnContext) -> str | None:
        fact = parse_explicit(turn.inbound.text)
        if fact is None:
            return None
        if not fact:
            return "Tell me what to remember, e.g. `remember: my sister is called Ana`."
        try:
            memory_id, updated = self.keeper.remember(self.keeper.access(turn), fact)
        except FactRefused as exc:
            return f"Not stored: {exc.why}."
        return f"Noted. (memory #{memory_id}{', updated' if updated else ''})"

    async def memory_command(self, turn: TurnContext, args: str) -> str:
        memories = self.keeper.store.list(turn.chat.id)
        if not memories:
            return "I have no memories for this chat yet. Say `remember: …` to add one."
        shown = memories[-LIST_LIMIT:]
        lines = [f"#{m.id} {m.line()}" + (" (global)" if m.chat_id is None else "") for m in shown]
        more = len(memories) - len(shown)
        if more:
            lines.insert(0, f"(the {len(shown)} newest of {len(memories)})")
        return "\n".join(lines)

    async def forget_command(self, turn: TurnContext, args: str) -> str:
        """Forget one memory for good: a tombstone keeps the reflector from learning it
        again from the messages that still say it."""
        if not args.strip():
            return USAGE
        try:
            memory = self.keeper.forget(self.keeper.access(turn), parse_memory_id(args))
        except (InputError, ToolError) as exc:
            return f"Not forgotten: {exc}."
        return f"Forgotten: #{memory.id} {memory.content}"

    def chat_data(self, chat: Chat) -> dict[str, int]:
        return memory_counts(self.keeper, chat)

    def export_chat(self, chat: Chat) -> list[ChatDataSection]:
        return export_memory(self.keeper, chat)

    def forget_chat(self, chat: Chat) -> dict[str, int]:
        return forget_memory(self.keeper, chat)

    async def checks(self) -> list[Check]:
        """What `start()` found: the model, the ranking mode, missing vectors."""
        embedder = self.keeper.embedder
        model = self.config.memory.embedding_model or "all-MiniLM-L6-v2 (bundled)"
        if embedder is None:
            detail = f"{model} could not be loaded; memory ranking uses keywords only"
            checks = [Check("embedding model", False, detail, fatal=False)]
        else:
            queries = getattr(embedder, "query_precision", "float32")
            detail = f"{embedder.model_name} ({embedder.dim} dims, {queries} queries)"
            checks = [Check("embedding model", True, detail)]
        checks.append(self._ranking_check())
        if self.keeper.store.vectors_enabled:
            missing = self.keeper.store.count_missing_vectors()
            detail = (
                f"{missing} memories lack a vector; run `mnemo memory reindex`"
                if missing
                else "every memory is embedded"
            )
            checks.append(Check("memory vectors", missing == 0, detail, fatal=False))
        return checks

    def _ranking_check(self) -> Check:
        wanted, mode = self.config.memory.retriever, self.keeper.mode()
        if mode == wanted:
            return Check("memory ranking", True, mode)
        reason = self.keeper.store.vectors_unavailable()
        detail = f"{wanted} unavailable ({reason}); falling back to {mode}"
        return Check("memory ranking", False, detail, fatal=False)
