"""PgDashboardStore: the `DashboardStore` on PostgreSQL.

The same queries as `bots.web.sqlite_store` (timestamps are ISO text on both engines, so a
day is `substr(created_at, 1, 10)` here too) on the same indexes (`messages (chat_id, id)`,
`memories (chat_id, archived, id)`, `compactions (chat_id, id)`, …). Where SQLite asks
several cheap questions in a row, this store asks them in one statement, since each is a
round trip to the server: a memory's provenance and the queue depth are one query each.
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
from core.pg_db import PgDatabase

# A memory's run, its asking message and its supersede links in one round trip; a NULL
# chat (a global memory) matches no run and no message.
_PROVENANCE = (
    "SELECT r.id, r.first_message_id, r.last_message_id, q.id, q.content,"
    " ARRAY(SELECT e.old_id FROM memory_supersede_edges e"
    "   WHERE e.new_id = %(memory)s ORDER BY e.old_id),"
    " ARRAY(SELECT e.new_id FROM memory_supersede_edges e"
    "   WHERE e.old_id = %(memory)s ORDER BY e.new_id)"
    " FROM (SELECT 1) AS one"
    " LEFT JOIN LATERAL (SELECT id, first_message_id, last_message_id FROM reflector_runs"
    "   WHERE chat_id = %(chat)s AND status = 'done'"
    "   AND started_at <= %(at)s AND finished_at >= %(at)s ORDER BY id LIMIT 1) r ON true"
    " LEFT JOIN LATERAL (SELECT id, content FROM messages"
    "   WHERE chat_id = %(chat)s AND role = 'user' AND created_at <= %(at)s"
    "   ORDER BY id DESC LIMIT 1) q ON true"
)


def _scope(chat_id: int | None) -> tuple[str, tuple[int, ...]]:
    return ("", ()) if chat_id is None else ("AND chat_id = %s", (chat_id,))


class PgDashboardStore:
    """The dashboard's reads on a `PgDatabase` (inside an open transaction, on its connection)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    # -- chats -------------------------------------------------------------------------

    def chat_overviews(self, search: str, limit: int, offset: int) -> list[ChatOverview]:
        where, params = chat_search(search, "%s")
        page = CHAT_PAGE.format(where=where) + CHAT_PAGE_ORDER
        rows = self.db.read(
            f"WITH page AS ({page} LIMIT %s OFFSET %s) {CHAT_FIGURES}{CHAT_FIGURES_ORDER}",
            (*params, limit, offset),
        )
        return [overview_from_row(row) for row in rows]

    def count_chats(self, search: str) -> int:
        where, params = chat_search(search, "%s")
        row = self.db.read_one(f"SELECT count(*) FROM chats c {where}", params)
        return int(row[0]) if row else 0

    def chat_overview(self, chat_id: int) -> ChatOverview | None:
        page = CHAT_PAGE.format(where="WHERE c.id = %s")
        row = self.db.read_one(f"WITH page AS ({page}) {CHAT_FIGURES}", (chat_id,))
        return overview_from_row(row) if row else None

    # -- a conversation ----------------------------------------------------------------

    def conversation(
        self, chat_id: int, before_id: int | None, limit: int
    ) -> list[ConversationEntry]:
        before, params = ("", (chat_id, limit)) if before_id is None else (
            " AND id < %s", (chat_id, before_id, limit)
        )  # fmt: skip
        rows = self.db.read(
            "SELECT id, role, sender, content, tool_calls, created_at, compaction_id"
            f" FROM messages WHERE chat_id = %s{before} ORDER BY id DESC LIMIT %s",
            params,
        )
        return [entry_from_row(row) for row in reversed(rows)]

    def unanswered(self, chat_id: int, first_id: int, last_id: int) -> dict[int, str]:
        rows = self.db.read(REPLY_STATES.format(p="%s"), (chat_id, first_id, last_id))
        return unanswered_from_rows(rows)

    def chat_person(self, chat_id: int) -> str:
        row = self.db.read_one(
            "SELECT sender FROM messages WHERE chat_id = %s AND role = 'user'"
            " ORDER BY id DESC LIMIT 1",
            (chat_id,),
        )
        return str(row[0] or "") if row else ""

    def compaction_marks(self, chat_id: int) -> list[CompactionMark]:
        rows = self.db.read(
            "SELECT id, trigger, status, first_message_id, last_message_id, messages_compacted,"
            " tokens_before, tokens_after, error, created_at FROM compactions"
            " WHERE chat_id = %s ORDER BY id",
            (chat_id,),
        )
        return [CompactionMark(*row) for row in rows]

    # -- where a memory came from ------------------------------------------------------

    def provenance(self, chat_id: int | None, memory_id: int, created_at: str) -> Provenance:
        row = self.db.read_one(
            _PROVENANCE, {"memory": memory_id, "chat": chat_id, "at": created_at}
        )
        assert row is not None  # FROM (SELECT 1): always one row
        return Provenance(
            run_id=row[0],
            run_first_message_id=row[1],
            run_last_message_id=row[2],
            message_id=row[3],
            message_text=row[4] if row[3] is not None else "",
            supersedes=[int(value) for value in row[5]],
            superseded_by=[int(value) for value in row[6]],
        )

    # -- per day, for the pictures -----------------------------------------------------

    def tokens_per_day(self, since: str, by: str) -> list[DayCount]:
        column = USAGE_SERIES[by]
        rows = self.db.read(
            f"SELECT substr(created_at, 1, 10) AS day, {column},"
            " sum(coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0))"
            f" FROM llm_usage WHERE created_at >= %s GROUP BY day, {column} ORDER BY day",
            (since,),
        )
        return days_from_rows(rows)

    def memories_per_day(self, chat_id: int | None, since: str) -> list[DayCount]:
        scope, params = _scope(chat_id)
        rows = self.db.read(
            "SELECT substr(created_at, 1, 10) AS day, 'added', count(*) FROM memories"
            f" WHERE created_at >= %s {scope} GROUP BY day ORDER BY day",
            (since, *params),
        )
        return days_from_rows(rows)

    def memories_before(self, chat_id: int | None, since: str) -> int:
        scope, params = _scope(chat_id)
        row = self.db.read_one(
            f"SELECT count(*) FROM memories WHERE created_at < %s {scope}", (since, *params)
        )
        return int(row[0]) if row else 0

    def reflector_runs_per_day(self, chat_id: int | None, since: str) -> list[DayCount]:
        scope, params = _scope(chat_id)
        rows = self.db.read(
            "SELECT substr(finished_at, 1, 10) AS day, status, count(*) FROM reflector_runs"
            f" WHERE finished_at >= %s {scope} GROUP BY day, status ORDER BY day",
            (since, *params),
        )
        return days_from_rows(rows)

    def compactions_per_day(self, chat_id: int | None, since: str) -> list[DayCount]:
        scope, params = _scope(chat_id)
        rows = self.db.read(
            "SELECT substr(created_at, 1, 10) AS day, trigger, count(*) FROM compactions"
            f" WHERE created_at >= %s {scope} GROUP BY day, trigger ORDER BY day",
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
