"""The dashboard's pages (GET): chats, a chat's conversation, memories, notes, strategies,
reflector runs and context, the scheduled tasks, the pictures, health. Each is a read: it
changes nothing."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from bots.web import charts
from bots.web.charts import Share
from bots.web.dashboard import Dashboard, session_pressure
from core.api import Chat
from core.clock import utc_now
from core.model.profile import effective_window, model_label
from core.tasks.extension import describe_task
from core.text import whole_number

CHATS_PER_PAGE = 50
MESSAGES_PER_PAGE = 100
MEMORIES_PER_PAGE = 50
CHART_DAYS = 30
PART_COLOURS = {
    "static prefix": "#4e79a7",
    "summary": "#b07aa1",
    "history": "#76b7b2",
    "newest message": "#f28e2b",
    "tool schemas": "#8cd17d",
    "framing": "#d4a6c8",
    "free": "#e8e8e8",
    "kept for the answer": "#bab0ac",
}


SECTION_COLOURS = ("#59a14f", "#edc948", "#e15759", "#9c755f", "#ff9da7")


def int_param(request: Request, name: str, default: int = 0) -> int:
    value = whole_number(request.query_params.get(name, ""))
    return default if value is None else value


def page_param(request: Request, items: int, per_page: int) -> tuple[int, int]:
    """(the page asked for, kept within 1 … the last page; how many pages there are): a
    page beyond the last shows the last, and no offset outgrows a database integer."""
    pages = max((items + per_page - 1) // per_page, 1)
    return min(max(int_param(request, "page", 1), 1), pages), pages


class Pages:
    """Renders each page from the dashboard's reads."""

    def __init__(
        self, dashboard: Dashboard, templates: Jinja2Templates, chat_page: bool = False
    ) -> None:
        self.dashboard = dashboard
        self.templates = templates
        self.chat_page_on = chat_page  # the chat page is served: the header links to it

    def render(self, request: Request, name: str, status: int = 200, **values: Any) -> Response:
        session = request.state.session
        values.setdefault("csrf", session.csrf if session is not None else "")
        values["signed_in"] = session is not None or getattr(request.state, "bearer", False)
        values["chat_page_on"] = self.chat_page_on
        return self.templates.TemplateResponse(request, name, values, status_code=status)

    def window(self) -> int:
        window = self.dashboard.planner.window()
        return effective_window(window.tokens, self.dashboard.config.llm.max_output_tokens)

    def chat_page(
        self, request: Request, chat: Chat, name: str, tab: str, **values: Any
    ) -> Response:
        overview = self.dashboard.store.chat_overview(chat.id)
        return self.render(request, name, chat=chat, overview=overview, tab=tab, **values)

    # -- the chats ---------------------------------------------------------------------

    async def chats(self, request: Request) -> Response:
        search = request.query_params.get("q", "")[:200]
        store = self.dashboard.store
        total = store.count_chats(search)
        page, pages = page_param(request, total, CHATS_PER_PAGE)
        rows = store.chat_overviews(search, CHATS_PER_PAGE, (page - 1) * CHATS_PER_PAGE)
        window, config = self.window(), self.dashboard.config
        pressures = {row.id: session_pressure(row, config, window) for row in rows}
        return self.render(
            request,
            "chats.html",
            rows=rows,
            total=total,
            search=search,
            page=page,
            pages=pages,
            pressures=pressures,
        )

    async def conversation(self, request: Request, chat: Chat) -> Response:
        before = int_param(request, "before") or None
        entries = self.dashboard.store.conversation(chat.id, before, MESSAGES_PER_PAGE)
        marks = {m.last_message_id: m for m in self.dashboard.store.compaction_marks(chat.id)}
        older = entries[0].id if len(entries) == MESSAGES_PER_PAGE else None
        store = self.dashboard.store
        unanswered = store.unanswered(chat.id, entries[0].id, entries[-1].id) if entries else {}
        return self.chat_page(
            request,
            chat,
            "conversation.html",
            "conversation",
            entries=entries,
            marks=marks,
            older=older,
            unanswered=unanswered,
        )

    async def memories(self, request: Request, chat: Chat) -> Response:
        archived = request.query_params.get("archived") == "1"
        question = request.query_params.get("q", "")[:2000]
        found = self.dashboard.memories(chat, archived=archived)
        page, pages = page_param(request, len(found), MEMORIES_PER_PAGE)
        start = (page - 1) * MEMORIES_PER_PAGE
        recall = self.dashboard.recall(chat, question) if question.strip() else None
        tombstones = self.dashboard.keeper.store.tombstones(chat.id)
        return self.chat_page(
            request,
            chat,
            "memories.html",
            "memories",
            memories=found[start : start + MEMORIES_PER_PAGE],
            total=len(found),
            page=page,
            pages=pages,
            archived=archived,
            recall=recall,
            question=question,
            globals=self.dashboard.global_memories(),
            tombstones=list(reversed(tombstones)),
            forgotten=int_param(request, "forgotten"),
        )

    async def memory(
        self, request: Request, chat: Chat, memory_id: int, status: int = 200, error: str = ""
    ) -> Response:
        memory = self.dashboard.memory_of(chat, memory_id)
        provenance = self.dashboard.store.provenance(memory.chat_id, memory.id, memory.created_at)
        done = request.query_params.get("done", "")
        return self.chat_page(
            request,
            chat,
            "memory.html",
            "memories",
            memory=memory,
            provenance=provenance,
            error=error,
            done=done,
            status=status,
        )

    async def notes(
        self, request: Request, chat: Chat, status: int = 200, error: str = ""
    ) -> Response:
        done = request.query_params.get("done", "")
        return self.chat_page(
            request,
            chat,
            "notes.html",
            "notes",
            notes=self.dashboard.notes(chat),
            changes=self.dashboard.note_changes(chat),
            error=error,
            done=done,
            status=status,
        )

    async def strategies(self, request: Request, chat: Chat) -> Response:
        found = self.dashboard.strategies_of(chat)
        return self.chat_page(request, chat, "strategies.html", "strategies", strategies=found)

    async def reflector(self, request: Request, chat: Chat) -> Response:
        today = utc_now().date()
        days = charts.day_range(CHART_DAYS, today)
        store = self.dashboard.store
        memories = charts.cumulative_line(
            store.memories_per_day(chat.id, days[0]),
            days,
            store.memories_before(chat.id, days[0]),
            "memories of this chat over time",
        )
        runs_chart = charts.stacked_bars(
            store.reflector_runs_per_day(chat.id, days[0]), days, "reflector runs per day"
        )
        return self.chat_page(
            request,
            chat,
            "reflector.html",
            "reflector",
            runs=self.dashboard.runs_of(chat),
            cursor=self.dashboard.cursor.position(chat.id),
            memories_chart=memories,
            runs_chart=runs_chart,
        )

    async def subagents(self, request: Request, chat: Chat) -> Response:
        runs = self.dashboard.subagent_runs_of(chat)
        return self.chat_page(request, chat, "subagents.html", "subagents", runs=runs)

    async def context(self, request: Request, chat: Chat) -> Response:
        view = await self.dashboard.context(chat)
        report = view.report
        return self.chat_page(
            request,
            chat,
            "context.html",
            "context",
            view=view,
            bar=context_bar(view),
            report=report,
        )

    async def tasks(self, request: Request) -> Response:
        shown = request.query_params.get("show", "") == "all"
        found = self.dashboard.scheduled_tasks(open_only=not shown)
        rows = [(task, describe_task(task)) for task in found]
        cancelled = whole_number(request.query_params.get("cancelled", ""))
        return self.render(request, "tasks.html", rows=rows, show_all=shown, cancelled=cancelled)

    # -- the pictures and health -------------------------------------------------------

    async def pictures(self, request: Request) -> Response:
        today = utc_now().date()
        days = charts.day_range(CHART_DAYS, today)
        since, store = days[0], self.dashboard.store
        figures = {
            "Tokens per day by kind": charts.stacked_bars(
                store.tokens_per_day(since, "kind"), days, "tokens per day by kind"
            ),
            "Tokens per day by model": charts.stacked_bars(
                store.tokens_per_day(since, "model"), days, "tokens per day by model"
            ),
            "Memories (every chat)": charts.cumulative_line(
                store.memories_per_day(None, since),
                days,
                store.memories_before(None, since),
                "memories over time",
            ),
            "Reflector runs per day": charts.stacked_bars(
                store.reflector_runs_per_day(None, since), days, "reflector runs per day"
            ),
            "Compactions per day by trigger": charts.stacked_bars(
                store.compactions_per_day(None, since), days, "compactions per day"
            ),
        }
        return self.render(request, "pictures.html", figures=figures, days=CHART_DAYS)

    async def health(self, request: Request) -> Response:
        health = await self.dashboard.health()
        return self.render(
            request,
            "health.html",
            health=health,
            config=self.dashboard.config,
            model=model_label(health.profile),
            model_checks=self.dashboard.model_checks,
            effective=self.window(),
        )


def context_bar(view: Any) -> Any:
    """The window as one bar: prefix, summary, history, each dynamic section, the newest
    message, what is free, and what is kept for the answer."""
    report = view.report
    dynamic_chars = sum(meta.final_chars for meta in report.sections if meta.included) or 1
    shares = [
        Share("static prefix", report.prefix_tokens, PART_COLOURS["static prefix"]),
        Share("summary", report.summary_tokens, PART_COLOURS["summary"]),
        Share("history", report.history_tokens, PART_COLOURS["history"]),
    ]
    for i, meta in enumerate(m for m in report.sections if m.included):
        tokens = report.dynamic_tokens * meta.final_chars / dynamic_chars
        colour = SECTION_COLOURS[i % len(SECTION_COLOURS)]
        shares.append(Share(f"{meta.key} ({meta.source})", tokens, colour))
    shares.append(Share("newest message", report.newest_tokens, PART_COLOURS["newest message"]))
    shares.append(Share("tool schemas", report.tools_tokens, PART_COLOURS["tool schemas"]))
    shares.append(Share("framing", max(report.framing_tokens, 0), PART_COLOURS["framing"]))
    used = sum(share.value for share in shares)
    shares.append(Share("free", max(report.effective_window - used, 0), PART_COLOURS["free"]))
    reserve = report.context_window - report.effective_window
    shares.append(Share("kept for the answer", reserve, PART_COLOURS["kept for the answer"]))
    total = max(report.context_window, used + reserve)
    return charts.share_bar(shares, total, "the context window")
