"""MemoryExtension: memory's hook into the turn loop (context, tools, commands, `remember:`)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from core.api import (
    Chat,
    ChatDataSection,
    Check,
    Command,
    CommandOption,
    ContextSection,
    Extension,
    Service,
    Tool,
    TurnContext,
)
from core.config import Config
from core.errors import InputError, ToolError
from memory.backend import LocalBackend, MemoryBackend
from memory.chat_data import (
    RECALL_INDEX,
    export_memory,
    export_recall,
    forget_memory,
    memory_counts,
)
from memory.daily_notes import DailyNotes, today
from memory.explicit import is_memory_exchange, noted_reply, parse_explicit
from memory.files import FileMemory
from memory.injection import max_injectable, memories_section, memory_cost, select_within_budget
from memory.keeper import USAGE, EmbedderFactory, FactRefused, MemoryKeeper
from memory.mcp_backend import McpMemoryBackend, ServerLookup
from memory.recall import Recaller, RecallService
from memory.recall_context import conversation_search_tool, recalled_section
from memory.store import MemoryStore, parse_memory_id
from memory.tools import MemoryTools

logger = logging.getLogger(__name__)

LIST_LIMIT = 50
SUGGESTIONS = 25  # Discord shows at most 25 choices
WindowStart = Callable[[int], int]  # chat id -> the newest message id out of the window
SECTION_TAG_CHARS = 80  # a section's tags and source around its text
OTHER_SECTIONS_TOKENS = 150  # dynamic room left for the other extensions' sections


class MemoryExtension(Extension):
    name = "memory"

    def __init__(
        self,
        config: Config,
        store: MemoryStore,
        embedder_factory: EmbedderFactory | None = None,
        files: FileMemory | None = None,
        memory_server: ServerLookup | None = None,
        recaller: Recaller | None = None,
        window_start: WindowStart | None = None,
    ) -> None:
        self.config = config
        self.keeper = MemoryKeeper(config, store, embedder_factory, files)
        self.backend: MemoryBackend = LocalBackend(self.keeper)
        if config.memory.backend == "mcp" and memory_server is not None:
            self.backend = McpMemoryBackend(config.memory, self.keeper, memory_server)
        self._tools = MemoryTools(self.keeper, self.backend)
        self.recaller = recaller
        self.window_start = window_start
        self.section_room: Callable[[], int] | None = None  # tokens for dynamic sections
        self.recall_cap: Callable[[], float] | None = None  # tokens recall may take at most
        self.recall_floor: Callable[[], float] | None = None  # share of the best hit's score

    async def start(self) -> None:
        """Load the embedding model before the first message (not on it)."""
        await self.keeper.load_embedder()

    def services(self) -> list[Service]:
        """The recall index's background job: warm-up at start, then indexing after turns."""
        return [RecallService(self.recaller)] if self.recaller is not None else []

    def tools(self) -> list[Tool]:
        tools = self._tools.tools()
        if self.recaller is not None:
            tools.append(conversation_search_tool(self.recaller))
        return tools

    def commands(self) -> list[Command]:
        return [
            Command(
                "memory", "list what I remember about this chat", self.memory_command, private=True
            ),
            Command(
                "forget",
                "forget a remembered fact: /forget ID",
                self.forget_command,
                CommandOption("id", self._forget_option_help(), True, self.suggest_forgettable),
            ),
        ]

    def _server_holds_copies(self) -> str:
        """The memory server's name when it ranks (`[memory] backend = "mcp"`), else "".

        It keeps a copy of each fact it was sent and has no way to list or delete one:
        `/forget` and its suggestions act on the database, which holds every fact (and
        drops a forgotten one from the server's answers), never on the server's own rows.
        """
        return self.config.memory.mcp_server if isinstance(self.backend, McpMemoryBackend) else ""

    def _forget_option_help(self) -> str:
        server = self._server_holds_copies()
        if not server:
            return "the memory's number (#12)"
        return (
            f"the memory's number (#12); rows only the memory server {server} holds are not listed"
        )

    def suggest_forgettable(self, chat: Chat, typed: str) -> list[tuple[str, str]]:
        """The chat's own memories whose number or text contains `typed`, newest first, as
        (id, label) pairs for `/forget`'s autocomplete."""
        needle = typed.strip().lstrip("#").lower()
        memories = self.keeper.store.list(chat.id, include_global=False)
        found = [
            (str(m.id), f"#{m.id} {m.line()}")
            for m in reversed(memories)
            if needle in str(m.id) or needle in m.content.lower()
        ]
        return found[:SUGGESTIONS]

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
        spent = 0.0
        chat = turn.chat
        daily = DailyNotes(self.keeper.files, chat.channel, chat.external_chat_id).section(today())
        if daily is not None:
            sections.append(daily)
        if memory.token_budget > 0:
            limit = max_injectable(memory.token_budget)
            ranked = await self.backend.rank(turn.chat, turn.query, limit)
            section = memories_section(self.keeper.store, turn.chat.id, ranked, memory.token_budget)
            if section is not None:
                sections.append(section)
                chosen = select_within_budget(ranked, memory.token_budget)
                spent = sum(memory_cost(item) for item in chosen)
        room = self._room(sections)
        recalled = self._recalled(turn, max(memory.token_budget - spent, 0.0), room)
        if recalled is not None:
            sections.append(recalled)
        return sections

    def _room(self, sections: list[ContextSection]) -> float:
        """Tokens the request's dynamic sections still have after `sections` (and a share
        kept for other extensions'), so the recalled section is never clipped."""
        if self.section_room is None:
            return float("inf")
        used = sum(len(section.text) + SECTION_TAG_CHARS for section in sections) / 4
        return self.section_room() - used - OTHER_SECTIONS_TOKENS

    def _recalled(
        self, turn: TurnContext, memories_left: float, room: float
    ) -> ContextSection | None:
        """Earlier messages out of the visible window that match the message: the recall
        budget plus what the memories left of theirs, within the room the request has for
        dynamic sections (a read: the index is not updated). A `remember: …` and its
        answer are left out: the memory they made is ranked with the memories. On a small
        window, lines scored far below the best one (`recall_floor`) are left out too."""
        own = self.config.memory.recall_token_budget
        if self.recaller is None or self.window_start is None or own <= 0:
            return None
        budget = min(own + memories_left, room)
        if self.recall_cap is not None:
            budget = min(budget, self.recall_cap())
        hits = self.recaller.recalled(
            turn.chat.id,
            turn.query,
            self.window_start(turn.chat.id),
            budget,
            skip=lambda hit: is_memory_exchange(hit.content),
            floor=self.recall_floor() if self.recall_floor is not None else 0.0,
        )
        return recalled_section(hits)

    async def after_turn(self, turn: TurnContext) -> None:
        """Index the turn's messages for recall, in the background."""
        if self.recaller is not None:
            self.recaller.catch_up_later(turn.chat.id)

    async def before_compaction(self, turn: TurnContext, up_to: int) -> bool:
        """The messages about to leave the window are indexed before they do."""
        if self.recaller is not None:
            await self.recaller.catch_up(turn.chat.id, up_to)
        return True

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
        await self.backend.upsert(turn.chat, memory_id)
        return noted_reply(memory_id, updated)

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
        server = self._server_holds_copies()
        if server:
            return (
                f"Forgotten: #{memory.id} {memory.content}\n(The memory server {server} keeps"
                " the copy it was sent; it is no longer shown here. Its own rows, without a"
                " number, cannot be listed or forgotten from the chat.)"
            )
        return f"Forgotten: #{memory.id} {memory.content}"

    def chat_data(self, chat: Chat) -> dict[str, int]:
        counts = memory_counts(self.keeper, chat)
        if self.recaller is not None:
            counts[RECALL_INDEX] = self.recaller.store.count(chat.id)
        return counts

    def export_chat(self, chat: Chat) -> list[ChatDataSection]:
        sections = export_memory(self.keeper, chat)
        if self.recaller is not None:
            sections.append(export_recall(self.recaller, chat))
        return sections

    def forget_chat(self, chat: Chat) -> dict[str, int]:
        gone = forget_memory(self.keeper, chat)
        if self.recaller is not None:
            gone[RECALL_INDEX] = self.recaller.forget_chat(chat.id)
        return gone

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
        checks.extend(self.backend.checks())
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
