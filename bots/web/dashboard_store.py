"""DatabaseDashboardStore: the `DashboardStore` on either engine, one SQL text over
`core.storage.database`.

Timestamps are ISO text on both engines, so a day is `substr(created_at, 1, 10)`. Per-chat
figures are index lookups (`messages (chat_id, id)`, `memories (chat_id, archived, id)`,
`compactions (chat_id, id)`, …), so a page of chats costs the same whatever the other chats
hold; the queue depth is one statement.
"""

from __future__ import annotations

from bots.web.store import (
    CHAT_FIGURES,
    CHAT_FIGURES_ORDER,
    CHAT_PAGE,
    CHAT_PAGE_ORDER,
    REPLY_STATES,
    USAGE_SERIES,
    ChatOverview,
    CompactionMark,
    ConversationEntry,
    DayCount,
    Provenance,
    QueueDepth,
    chat_search,
    days_from_rows,
    entry_from_row,
    overview_from_row,
    unanswered_from_rows,
)
from core.storage.database import Database


def _scope(chat_id: int | None) -> tuple[str, tuple[int, ...]]:
    return ("", ()) if chat_id is None else ("AND chat_id = ?", (chat_id,))


class DatabaseDashboardStore:
    """The dashboard's reads on a `Database` (inside an open transaction, in it)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- chats -------------------------------------------------------------------------

    def chat_overviews(self, search: str, limit: int, offset: int) -> list[ChatOverview]:
        where, params = chat_search(search)
        page = CHAT_PAGE.format(where=where) + CHAT_PAGE_ORDER
        rows = self.db.read(
            f"WITH page AS ({page} LIMIT ? OFFSET ?) {CHAT_FIGURES}{CHAT_FIGURES_ORDER}",
            (*params, limit, offset),
        )
        return [overview_from_row(row) for row in rows]

    def count_chats(self, search: str) -> int:
        where, params = chat_search(search)
        row = self.db.read_one(f"SELECT count(*) FROM chats c {where}", params)
        return int(row[0]) if row else 0

    def chat_overview(self, chat_id: int) -> ChatOverview | None:
        page = CHAT_PAGE.format(where="WHERE c.id = ?")
        row = self.db.read_one(f"WITH page AS ({page}) {CHAT_FIGURES}", (chat_id,))
        return overview_from_row(row) if row else None

    # -- a conversation ----------------------------------------------------------------

    def conversation(
        self, chat_id: int, before_id: int | None, limit: int
    ) -> list[ConversationEntry]:
        before, params = ("", (chat_id, limit)) if before_id is None else (
            " AND id < ?", (chat_id, before_id, limit)
        )  # fmt: skip
        rows = self.db.read(
            "SELECT id, role, sender, content, tool_calls, created_at, compaction_id"
            f" FROM messages WHERE chat_id = ?{before} ORDER BY id DESC LIMIT ?",
            params,
        )
        return [entry_from_row(row) for row in reversed(rows)]

    def unanswered(self, chat_id: int, first_id: int, last_id: int) -> dict[int, str]:
        rows = self.db.read(REPLY_STATES, (chat_id, first_id, last_id))
        return unanswered_from_rows(rows)

    def chat_person(self, chat_id: int) -> str:
        row = self.db.read_one(
            "SELECT sender FROM messages WHERE chat_id = ? AND role = 'user'"
            " ORDER BY id DESC LIMIT 1",
            (chat_id,),
        )
        return str(row[0] or "") if row else ""

    def compaction_marks(self, chat_id: int) -> list[CompactionMark]:
        rows = self.db.read(
            "SELECT id, trigger, status, first_message_id, last_message_id, messages_compacted,"
            " tokens_before, tokens_after, error, created_at FROM compactions"
            " WHERE chat_id = ? ORDER BY id",
            (chat_id,),
        )
        return [CompactionMark(*row) for row in rows]

    # -- where a memory came from ------------------------------------------------------

    def provenance(self, chat_id: int | None, memory_id: int, created_at: str) -> Provenance:
        run = message = None
        if chat_id is not None:
            run = self.db.read_one(
                "SELECT id, first_message_id, last_message_id FROM reflector_runs"
                " WHERE chat_id = ? AND status = 'done' AND started_at <= ? AND finished_at >= ?"
                " ORDER BY id LIMIT 1",
                (chat_id, created_at, created_at),
            )
            message = self.db.read_one(
                "SELECT id, content FROM messages WHERE chat_id = ? AND role = 'user'"
                " AND created_at <= ? ORDER BY id DESC LIMIT 1",
                (chat_id, created_at),
            )
        older = self.db.read(
            "SELECT old_id FROM memory_supersede_edges WHERE new_id = ? ORDER BY old_id",
            (memory_id,),
        )
        newer = self.db.read(
            "SELECT new_id FROM memory_supersede_edges WHERE old_id = ? ORDER BY new_id",
            (memory_id,),
        )
        return Provenance(
            run_id=run[0] if run else None,
            run_first_message_id=run[1] if run else None,
            run_last_message_id=run[2] if run else None,
            message_id=message[0] if message else None,
            message_text=message[1] if message else "",
            supersedes=[int(row[0]) for row in older],
            superseded_by=[int(row[0]) for row in newer],
        )

    # -- per day, for the pictures -----------------------------------------------------

    def tokens_per_day(self, since: str, by: str) -> list[DayCount]:
        column = USAGE_SERIES[by]
        rows = self.db.read(
            f"SELECT substr(created_at, 1, 10) AS day, {column},"
            " sum(coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0))"
            f" FROM llm_usage WHERE created_at >= ? GROUP BY day, {column} ORDER BY day",
            (since,),
        )
        return days_from_rows(rows)

    def memories_per_day(self, chat_id: int | None, since: str) -> list[DayCount]:
        scope, params = _scope(chat_id)
        rows = self.db.read(
            "SELECT substr(created_at, 1, 10) AS day, 'added', count(*) FROM memories"
            f" WHERE created_at >= ? {scope} GROUP BY day ORDER BY day",
            (since, *params),
        )
        return days_from_rows(rows)

    def memories_before(self, chat_id: int | None, since: str) -> int:
        scope, params = _scope(chat_id)
        row = self.db.read_one(
            f"SELECT count(*) FROM memories WHERE created_at < ? {scope}", (since, *params)
        )
        return int(row[0]) if row else 0

    def reflector_runs_per_day(self, chat_id: int | None, since: str) -> list[DayCount]:
        scope, params = _scope(chat_id)
        rows = self.db.read(
            "SELECT substr(finished_at, 1, 10) AS day, status, count(*) FROM reflector_runs"
            f" WHERE finished_at >= ? {scope} GROUP BY day, status ORDER BY day",
            (since, *params),
        )
        return days_from_rows(rows)

    def compactions_per_day(self, chat_id: int | None, since: str) -> list[DayCount]:
        scope, params = _scope(chat_id)
        rows = self.db.read(
            "SELECT substr(created_at, 1, 10) AS day, trigger, count(*) FROM compactions"
            f" WHERE created_at >= ? {scope} GROUP BY day, trigger ORDER BY day",
            (since, *params),
        )
        return days_from_rows(rows)

    # -- health ------------------------------------------------------------------------

    def queue_depth(self) -> QueueDepth:
        row = self.db.read_one(
            "SELECT (SELECT count(*) FROM inbox WHERE state = 'pending'),"
            " (SELECT count(*) FROM outbox WHERE delivered_at IS NULL)"
        )
        return QueueDepth(int(row[0]), int(row[1])) if row else QueueDepth(0, 0)
