"""The dashboard's reads that the packages' own stores do not offer: `DashboardStore`.

Overviews of many chats at once, a page of a conversation with its compaction marks, where
a memory came from, and counts per day for the pictures. Only reads: every write the
dashboard makes goes through the owning package (memory's store and quality gate, its
forgetting, `FileMemory`). `bots.web.dashboard_store.DatabaseDashboardStore` is its one
implementation, for both engines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from core.text import whole_number


@dataclass(frozen=True)
class ChatOverview:
    """One line of the chats page."""

    id: int
    channel: str
    external_chat_id: str
    title: str
    kind: str
    messages: int
    memories: int
    last_activity: str  # '' for a chat without messages
    session_tokens: int  # stored estimate of the current session's messages
    summary: str  # the session's summary ('' before the first compaction)
    session_start: int  # the current session holds the messages after this id

    @property
    def key(self) -> str:
        return f"{self.channel}:{self.external_chat_id}"


@dataclass(frozen=True)
class ConversationEntry:
    """A stored message as the conversation page shows it."""

    id: int
    role: str
    sender: str
    content: str
    tool_calls: str  # the JSON as stored ('' for none)
    created_at: str
    compaction_id: int | None


@dataclass(frozen=True)
class CompactionMark:
    id: int
    trigger: str
    status: str
    first_message_id: int
    last_message_id: int
    messages_compacted: int
    tokens_before: int
    tokens_after: int
    error: str
    created_at: str


@dataclass(frozen=True)
class Provenance:
    """Where a memory came from, as far as the database can tell.

    `run_id` and its message range: the reflector run that committed it (a run's memories
    commit in its transaction, so the run's time span contains the memory's creation).
    `message_id`: the newest user message of the chat stored before it (for `remember:` and
    tool memories, the message that asked). Supersede links both ways.
    """

    run_id: int | None
    run_first_message_id: int | None
    run_last_message_id: int | None
    message_id: int | None
    message_text: str
    supersedes: list[int]
    superseded_by: list[int]


@dataclass(frozen=True)
class DayCount:
    """How many of something happened on a day (UTC), split by `series`."""

    day: str  # YYYY-MM-DD
    series: str
    value: int


@dataclass(frozen=True)
class QueueDepth:
    pending_messages: int  # stored, not yet answered
    undelivered_replies: int


class DashboardStore(Protocol):
    """Every read of the dashboard the other stores do not have."""

    def chat_overviews(self, search: str, limit: int, offset: int) -> list[ChatOverview]:
        """Chats matching `search` (title, channel:chat_id or row id; '' for all), the most
        recently active first."""
        ...

    def count_chats(self, search: str) -> int: ...

    def chat_overview(self, chat_id: int) -> ChatOverview | None: ...

    def conversation(
        self, chat_id: int, before_id: int | None, limit: int
    ) -> list[ConversationEntry]:
        """Up to `limit` of the chat's messages older than `before_id` (None: the newest),
        oldest first."""
        ...

    def chat_person(self, chat_id: int) -> str:
        """The sender name of the chat's newest user message ('' if none): whose "I" its
        memories speak in, for a tombstone."""
        ...

    def unanswered(self, chat_id: int, first_id: int, last_id: int) -> dict[int, str]:
        """The chat's user messages with ids in [first_id, last_id] that got no delivered
        answer, each with why: "no reply yet", "answered with an error" (the model never
        answered), "reply not delivered". Messages that needed no reply are not listed."""
        ...

    def compaction_marks(self, chat_id: int) -> list[CompactionMark]:
        """The chat's compactions, oldest first."""
        ...

    def provenance(self, chat_id: int | None, memory_id: int, created_at: str) -> Provenance: ...

    def tokens_per_day(self, since: str, by: str) -> list[DayCount]:
        """Prompt + completion tokens per day since `since`, by `kind` or `model`."""
        ...

    def memories_per_day(self, chat_id: int | None, since: str) -> list[DayCount]:
        """Memories created per day (series `added`), of one chat or of all."""
        ...

    def memories_before(self, chat_id: int | None, since: str) -> int:
        """Memories created before `since` (the start of a cumulative line)."""
        ...

    def reflector_runs_per_day(self, chat_id: int | None, since: str) -> list[DayCount]:
        """Reflector runs per day by status (done, failed, skipped)."""
        ...

    def compactions_per_day(self, chat_id: int | None, since: str) -> list[DayCount]:
        """Compactions per day by trigger."""
        ...

    def queue_depth(self) -> QueueDepth: ...


# A page of chats, then each one's figures (one statement on both engines; `{where}` is a
# `chat_search` clause). Active chats first, the newest activity first.
CHAT_PAGE = (
    "SELECT c.id, c.channel, c.external_chat_id, c.title, c.kind,"
    " (SELECT max(m.id) FROM messages m WHERE m.chat_id = c.id) AS last_id"
    " FROM chats c {where}"
)
CHAT_PAGE_ORDER = " ORDER BY last_id DESC NULLS LAST, c.id DESC"
CHAT_FIGURES = (
    "SELECT p.id, p.channel, p.external_chat_id, p.title, p.kind,"
    " (SELECT count(*) FROM messages m WHERE m.chat_id = p.id),"
    " (SELECT count(*) FROM memories x WHERE x.chat_id = p.id AND x.archived = 0),"
    " coalesce((SELECT m.created_at FROM messages m WHERE m.id = p.last_id), ''),"
    " coalesce((SELECT sum(m.token_estimate) FROM messages m"
    "   WHERE m.chat_id = p.id AND m.id > coalesce(s.started_at_message_id, 0)), 0),"
    " coalesce(s.summary, ''), coalesce(s.started_at_message_id, 0)"
    " FROM page p LEFT JOIN sessions s ON s.chat_id = p.id"
)
CHAT_FIGURES_ORDER = " ORDER BY p.last_id DESC NULLS LAST, p.id DESC"
# A page's user messages with their inbox state and reply.
REPLY_STATES = (
    "SELECT i.message_id, i.state, coalesce(o.is_error, 0),"
    " CASE WHEN o.delivered_at IS NULL THEN 0 ELSE 1 END"
    " FROM inbox i LEFT JOIN outbox o ON o.inbox_id = i.id"
    " WHERE i.chat_id = ? AND i.message_id BETWEEN ? AND ?"
)
USAGE_SERIES = {"kind": "kind", "model": "model"}  # the column each "tokens by" series groups


def chat_search(search: str) -> tuple[str, list[Any]]:
    """The WHERE clause of a chat search (title, `channel:chat_id` or the row id), and its
    parameters."""
    text = search.strip().lower()
    if not text:
        return "", []
    like = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    where = (
        "WHERE lower(coalesce(c.title, '')) LIKE ? ESCAPE '\\'"
        " OR lower(c.channel || ':' || c.external_chat_id) LIKE ? ESCAPE '\\'"
    )
    params: list[Any] = [like, like]
    number = whole_number(text)
    if number is not None:
        where += " OR c.id = ?"
        params.append(number)
    return where, params


def overview_from_row(row: Sequence[Any]) -> ChatOverview:
    """(id, channel, external_chat_id, title, kind, messages, memories, last_activity,
    session_tokens, summary, session_start), as the store selects them."""
    return ChatOverview(
        id=int(row[0]),
        channel=row[1],
        external_chat_id=row[2],
        title=row[3] or "",
        kind=row[4],
        messages=int(row[5]),
        memories=int(row[6]),
        last_activity=row[7],
        session_tokens=int(row[8]),
        summary=row[9],
        session_start=int(row[10]),
    )


def entry_from_row(row: Sequence[Any]) -> ConversationEntry:
    """(id, role, sender, content, tool_calls, created_at, compaction_id) as an entry."""
    return ConversationEntry(
        int(row[0]), row[1], row[2] or "", row[3] or "", row[4] or "", row[5], row[6]
    )


def days_from_rows(rows: Sequence[Sequence[Any]]) -> list[DayCount]:
    """(day, series, count) rows as `DayCount`s."""
    return [DayCount(str(row[0]), str(row[1]), int(row[2] or 0)) for row in rows]


def unanswered_from_rows(rows: Sequence[Sequence[Any]]) -> dict[int, str]:
    """(message_id, inbox state, reply is_error, reply delivered) rows → {message id: why
    it has no delivered answer}, for the messages that lack one."""
    found: dict[int, str] = {}
    for message_id, state, is_error, delivered in rows:
        if state == "pending":
            found[int(message_id)] = "no reply yet"
        elif state == "answered" and int(is_error):
            found[int(message_id)] = "answered with an error"
        elif state == "answered" and not int(delivered):
            found[int(message_id)] = "reply not delivered"
    return found
