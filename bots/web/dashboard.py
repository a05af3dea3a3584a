"""What the dashboard knows and does, through each package's own door.

Reads: the dashboard store (overviews, per-day counts), memory's store and ranker (the
same `MemoryKeeper.rank` a turn uses), the strategies' and the reflector's stores, and
`/context`'s report. Writes: a memory's new text passes the quality gate and memory's
store; forgetting leaves the tombstone `/forget` leaves; AGENTS.md is written by
`FileMemory`, and logged as the notes tool's writes are. Nothing here runs SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bots.web.store import ChatOverview, DashboardStore
from core.api import QUERY_CHARS, Chat, ChatKind, Check, ContextSection, Inbound, TurnContext
from core.chat.keys import is_control_chat
from core.cli.doctor import storage_checks
from core.config import Config
from core.context.plan import RequestPlanner, pressure
from core.context.report import ContextReport, context_report
from core.errors import InputError
from core.model.client import LLM, OpenAILLM
from core.model.probes import model_checks
from core.model.profile import ModelProfile, Window, load_profile
from core.storage.engine import Storage
from core.storage.store import SessionStore
from core.storage.stores import delivery_store, live_turn_store
from core.subagents.run_store import DatabaseSubagentRunStore, SubagentRun
from core.tasks.task_store import ScheduledTask, TaskStore
from core.turn.extensions import Extensions
from core.turn.live import LiveView, live_view
from memory.hidden_text import visible_text
from memory.injection import max_injectable, memories_section, select_within_budget
from memory.keeper import MemoryKeeper
from memory.notes import EXCERPT_CHARS
from memory.store import Memory, NoteChange
from memory.strategies.store import Strategy, StrategyStore
from reflector.store import CursorStore, RunRow, RunStore

RECALL_SHOWN = 20
CHAT_KINDS = ("private", "group", "channel", "thread")
OPERATOR = "the operator (dashboard)"
FORGOTTEN_BY = OPERATOR
NOTE_CHANGES_SHOWN = 100


@dataclass(frozen=True)
class Recall:
    """What the bot would recall for a question: the ranking, and the block it injects."""

    question: str
    mode: str
    ranked: list[tuple[Memory, float, bool]]  # memory, score, injected
    block: str


@dataclass(frozen=True)
class ContextView:
    report: ContextReport
    sections: list[ContextSection]
    query: str


@dataclass(frozen=True)
class Health:
    checks: list[Check]
    window: Window
    profile: ModelProfile
    pending_messages: int
    undelivered_replies: int
    chats_to_reflect: int


@dataclass
class Dashboard:
    """The parts of a running bot the dashboard reads and writes through."""

    config: Config
    sessions: SessionStore
    store: DashboardStore
    keeper: MemoryKeeper
    strategies: StrategyStore
    runs: RunStore
    cursor: CursorStore
    extensions: Extensions
    planner: RequestPlanner
    llm: LLM
    storage: Storage | None = None
    model_checks: list[Check] = field(default_factory=list)  # the last "check the model"

    # -- chats -------------------------------------------------------------------------

    def chat(self, chat_id: int) -> Chat:
        chat = self.sessions.chat_by_id(chat_id)
        if chat is None:
            raise InputError(f"no chat #{chat_id}")
        return chat

    def memories(self, chat: Chat, *, archived: bool) -> list[Memory]:
        """The chat's own memories (not global ones), newest first."""
        found = self.keeper.store.list(chat.id, include_global=False, include_archived=archived)
        return list(reversed(found))

    def global_memories(self) -> list[Memory]:
        return list(reversed(self.keeper.store.list(None)))

    def memory_of(self, chat: Chat, memory_id: int) -> Memory:
        """A memory the chat's page may show and change: the chat's own, or a global one.
        Another chat's memory is "not found", never shown."""
        memory = self.keeper.store.get(memory_id)
        if memory is None or memory.chat_id not in (chat.id, None):
            raise InputError(f"no memory #{memory_id} in this chat")
        return memory

    def strategies_of(self, chat: Chat) -> list[Strategy]:
        return self.strategies.for_chat(chat.id, include_global=False)

    def runs_of(self, chat: Chat, limit: int = 100) -> list[RunRow]:
        return self.runs.recent(chat.id, limit)

    def subagent_runs_of(self, chat: Chat, limit: int = 50) -> list[SubagentRun]:
        """The chat's sub-agent runs, newest first (none without the database at hand)."""
        if self.storage is None:
            return []
        return DatabaseSubagentRunStore(self.storage.database).recent(chat.id, limit)

    def live_turn_of(self, chat: Chat) -> LiveView | None:
        """The chat's turn in progress, or its last one (None without the database at hand
        or before a turn of it reached the model). A read: it changes nothing."""
        if self.storage is None:
            return None
        return live_view(live_turn_store(self.storage), delivery_store(self.storage), chat.id)

    # -- scheduled tasks -----------------------------------------------------------------

    def scheduled_tasks(self, open_only: bool = True) -> list[ScheduledTask]:
        """Every chat's tasks, soonest first (none without a storage)."""
        if self.storage is None:
            return []
        return TaskStore(self.storage.database).every_task(open_only=open_only)

    def cancel_task(self, task_id: int) -> None:
        """Cancel an open task; `InputError` when there is none by that number."""
        if self.storage is None or not TaskStore(self.storage.database).cancel(task_id):
            raise InputError(f"no open task #{task_id}")

    # -- what the bot would recall, and what its next request holds ---------------------

    def recall(self, chat: Chat, question: str) -> Recall:
        """Rank as a turn does (`MemoryKeeper.rank` on the message's last 500 characters,
        as many as could be injected) and build the same memory block."""
        query = question[-QUERY_CHARS:]
        budget = self.config.memory.token_budget
        ranked = self.keeper.rank(chat.id, query, max(max_injectable(budget), RECALL_SHOWN))
        chosen = {m.id for m in select_within_budget(ranked, budget)} if budget > 0 else set()
        section = memories_section(self.keeper.store, chat.id, ranked, budget) if budget else None
        shown = [(item.memory, item.score, item.memory.id in chosen) for item in ranked]
        return Recall(
            question, self.keeper.mode(), shown[:RECALL_SHOWN], section.text if section else ""
        )

    async def context(self, chat: Chat) -> ContextView:
        """`/context` for the chat: its next request planned (without the model) for its
        newest user message, section by section. A read: nothing changes."""
        last_user = next(
            (m.content for m in reversed(self.sessions.history(chat.id)) if m.role == "user"), ""
        )
        kind: ChatKind = chat.kind if chat.kind in CHAT_KINDS else "private"  # type: ignore[assignment]
        inbound = Inbound(chat.channel, chat.external_chat_id, last_user, chat_kind=kind)
        turn = TurnContext(chat, inbound, is_control_chat(self.config, chat))
        sections = await self.extensions.context_sections(turn)
        return ContextView(context_report(self.planner, chat, sections), sections, last_user)

    # -- writes, each through its package ----------------------------------------------

    def edit_memory(self, chat: Chat, memory_id: int, text: str) -> Memory:
        """New text for a memory: the quality gate first (`FactRefused` says why not), then
        memory's store, which re-indexes and re-embeds it."""
        memory = self.memory_of(chat, memory_id)
        if memory.archived:
            raise InputError(f"memory #{memory_id} is archived; archived memories are history")
        content = self.keeper.checked(text)
        self.keeper.store.update(memory.id, content)
        return self.memory_of(chat, memory_id)

    def forget_memory(self, chat: Chat, memory_id: int) -> Memory:
        """Forget as `/forget` does: deleted, with a tombstone in the same transaction, so
        the reflector does not learn it again. Whose "I" the text uses: its sender's, else
        (a private chat) the chat's person."""
        memory = self.memory_of(chat, memory_id)
        private = chat.kind == "private" and memory.chat_id is not None
        speaker = memory.sender_name or (self.store.chat_person(chat.id) if private else "")
        self.keeper.store.forget(memory.id, forgotten_by=FORGOTTEN_BY, speaker=speaker)
        return memory

    def notes(self, chat: Chat) -> dict[str, str]:
        """The AGENTS.md of each scope that reaches this chat's requests."""
        files = self.keeper.files
        return {
            scope: files.read(scope, chat.channel, chat.external_chat_id)
            for scope in ("global", "channel", "chat")
        }

    def note_changes(self, chat: Chat) -> list[NoteChange]:
        """Who changed notes from this chat (and who was refused), newest first."""
        return self.keeper.store.note_changes(chat.id, NOTE_CHANGES_SHOWN)

    def save_notes(self, chat: Chat, text: str) -> None:
        """The operator's new text for the chat's AGENTS.md: no gate (the operator writes
        the bot's instructions), but without hidden characters, and logged."""
        text = visible_text(text)
        try:
            self.keeper.files.write("chat", chat.channel, chat.external_chat_id, text)
        except ValueError as exc:
            raise InputError(str(exc)) from exc
        action = "replace" if text.strip() else "clear"
        excerpt = text.strip()[:EXCERPT_CHARS]
        change = NoteChange(
            chat.id,
            "chat",
            action,
            "dashboard",
            sender_name=OPERATOR,
            chars_after=len(text),
            excerpt=excerpt,
        )
        self.keeper.store.record_note_change(change)

    # -- health ------------------------------------------------------------------------

    async def health(self) -> Health:
        """What `mnemo doctor` says without calling the model (that is `check_model`)."""
        checks: list[Check] = []
        if self.storage is not None:
            checks.extend(storage_checks(self.storage))
        checks.extend(await self.extensions.checks())
        queue = self.store.queue_depth()
        return Health(
            checks=checks,
            window=self.planner.window(),
            profile=load_profile(self.sessions, self.planner.model),
            pending_messages=queue.pending_messages,
            undelivered_replies=queue.undelivered_replies,
            chats_to_reflect=len(self.cursor.pending_chats()),
        )

    async def check_model(self) -> list[Check]:
        """`mnemo doctor`'s model checks: tiny requests to the model server (an action:
        what they learn about the model is remembered, as at start)."""
        llm = self.llm
        if not isinstance(llm, OpenAILLM):
            return [Check("llm", False, "this model client cannot be probed")]
        try:
            models = await llm.ping()
        except Exception as exc:
            checks = [Check("llm", False, f"{self.config.llm.base_url} does not answer: {exc}")]
        else:
            found = [Check("llm", True, f"{self.config.llm.base_url} answers ({models})")]
            checks = found + await model_checks(llm, self.sessions, self.config.llm)
        self.model_checks = checks
        return checks


def session_pressure(chat: ChatOverview, config: Config, window: int) -> str:
    """The chats page's pressure: the current session's stored token estimates (plus its
    summary) against the effective window; the chat's context page plans the real request."""
    tokens = chat.session_tokens + int(len(chat.summary) / config.context.chars_per_token)
    return pressure(tokens, window)
