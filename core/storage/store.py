"""The core's storage interface: chats, their messages, sessions, compactions, LLM usage.

`SessionStore` is the one door the core uses; `DatabaseSessionStore`
(`core.storage.session_store`) is its one implementation over `core.storage.database`, for
both engines (the delivery store likewise, `core.storage.delivery_store`). Records here are
plain frozen dataclasses, built from rows of the same columns on both engines by the
`*_from_row` functions at the end.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from core.api import Chat, Inbound, Outbound
from core.model.profile import ModelProfile
from core.model.tokens import Calibration

__all__ = [
    "Calibration",
    "Chat",
    "CompactionRecord",
    "DeliveryStore",
    "DeliveryTotals",
    "NewMessage",
    "Session",
    "SessionStore",
    "StoredInbound",
    "StoredMessage",
    "StoredReply",
    "TurnLease",
    "chat_from_row",
    "compaction_from_row",
    "inbound_from_row",
    "message_from_row",
    "reply_from_row",
]


@dataclass(frozen=True)
class StoredMessage:
    id: int
    chat_id: int
    role: str
    sender: str
    content: str
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    created_at: str
    token_estimate: int
    # A user message's dynamic-context block as first sent (None: never sent; '': nothing
    # new to show then). Not part of `to_openai()`: the request layout places it.
    context: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """This message as an OpenAI chat `messages` entry."""
        message: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        if self.tool_call_id:
            message["tool_call_id"] = self.tool_call_id
        return message


@dataclass(frozen=True)
class NewMessage:
    """A message not yet stored."""

    role: str
    content: str
    sender: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    created_at: str = ""  # '' for now


@dataclass(frozen=True)
class Session:
    chat_id: int
    summary: str | None
    compaction_count: int
    started_at_message_id: int
    updated_at: str


@dataclass(frozen=True)
class CompactionRecord:
    """One compaction as stored: which messages it covered and what it produced."""

    trigger: Literal["threshold", "overflow", "command"]
    status: Literal["summarised", "fallback"]
    first_message_id: int
    last_message_id: int
    messages_compacted: int
    tokens_before: int
    tokens_after: int
    summary_calls: int
    archive_path: str
    summary: str | None  # None keeps the session's previous summary
    error: str = ""


class SessionStore(Protocol):
    """Every read and write of chats, messages, sessions and usage."""

    def transaction(self) -> AbstractContextManager[Any]:
        """One unit of work: everything inside commits together or not at all."""
        ...

    # -- chats
    def get_or_create_chat(
        self, channel: str, external_chat_id: str, title: str = "", kind: str = "private"
    ) -> Chat: ...

    def find_chat(self, channel: str, external_chat_id: str) -> Chat | None: ...

    def chat_by_id(self, chat_id: int) -> Chat | None: ...

    def list_chats(self, limit: int = 100) -> list[Chat]:
        """Chats, oldest first."""
        ...

    def delete_chat(self, chat_id: int) -> int:
        """Delete the chat: its messages, session, compactions and the chat row (and by
        cascade anything else that refers to it); its usage rows stay, with no chat.
        Return how many messages went."""
        ...

    def scrub_deleted(self, tables: tuple[str, ...] = ()) -> None:
        """After a deletion that promises permanence (outside any transaction): leave no
        copy of the deleted rows where the engine can still hold one. SQLite: checkpoint and
        truncate the WAL (`secure_delete` already zeroed the freed bytes). PostgreSQL:
        VACUUM `tables` (none: every table), so dead rows leave the tables and indexes."""
        ...

    # -- messages
    def append(self, chat_id: int, messages: list[NewMessage]) -> list[int]:
        """Store `messages` in one transaction; return their ids in order."""
        ...

    def history(self, chat_id: int, *, after_id: int | None = None) -> list[StoredMessage]:
        """The current session's messages, oldest first (after `after_id` if given)."""
        ...

    def messages_between(self, chat_id: int, after_id: int, limit: int) -> list[StoredMessage]:
        """Up to `limit` messages of the chat newer than `after_id`, oldest first."""
        ...

    def count_messages(self, chat_id: int | None = None) -> int:
        """Messages of the chat (of every chat when None)."""
        ...

    def newest_message_id(self, chat_id: int) -> int:
        """The id of the chat's newest message, 0 when it has none."""
        ...

    def keep_context(self, message_id: int, context: str) -> None:
        """Record the dynamic context a user message was first sent with (later calls for
        the same message change nothing)."""
        ...

    # -- sessions and compactions
    def session(self, chat_id: int) -> Session: ...

    def reset_session(self, chat_id: int) -> None:
        """Start a new session: later requests see only newer messages; nothing is deleted."""
        ...

    def record_compaction(self, chat_id: int, compaction: CompactionRecord) -> int:
        """Store the compaction, mark its messages and move the session start, together."""
        ...

    def compaction_totals(self, chat_id: int) -> tuple[int, int]:
        """(compactions so far, estimated tokens saved by them) for the chat."""
        ...

    def compactions(self, chat_id: int) -> list[CompactionRecord]:
        """The chat's compactions, oldest first (`summary`: None, it lives in the session)."""
        ...

    def archive_paths(self) -> list[str]:
        """Where every compaction archived its messages, oldest first."""
        ...

    def compacted_message_ids(self) -> set[int]:
        """Ids of every message some compaction covered."""
        ...

    # -- model usage and calibration
    def peak_prompt_tokens(self, chat_id: int, kind: str) -> int:
        """The largest prompt (tokens the server counted) of the chat's `kind` requests;
        0 when none."""
        ...

    def record_usage(
        self,
        chat_id: int | None,
        kind: str,
        model: str,
        prompt_tokens: int | None,
        completion_tokens: int | None,
        latency_ms: int,
        ok: bool = True,
    ) -> None: ...

    def load_calibration(self, model: str) -> Calibration | None: ...

    def save_calibration(self, calibration: Calibration) -> None: ...

    def load_model_profile(self, model: str) -> ModelProfile | None:
        """What was learned about `model` and its server, if anything."""
        ...

    def save_model_profile(self, profile: ModelProfile) -> None: ...


# -- delivery: inbound messages stored on arrival, replies until delivered, turn leases


@dataclass(frozen=True)
class StoredInbound:
    """A message as it arrived, stored before it waited for its chat's turn."""

    id: int
    chat: Chat
    inbound: Inbound
    message_id: int = 0  # its row in the history once its turn stored it (0 before)


@dataclass(frozen=True)
class StoredReply:
    """A reply recorded with its turn; `id` 0 for one that could not be stored."""

    id: int
    outbound: Outbound
    attempts: int = 0


@dataclass(frozen=True)
class TurnLease:
    """A chat's turn, held by one owner (a process's dispatcher) until `expires_at`."""

    chat_id: int
    owner: str
    expires_at: float  # seconds since the epoch


@dataclass(frozen=True)
class DeliveryTotals:
    """What happened to the inbound messages and replies (of one channel, or all)."""

    received: int
    pending: int
    answered: int
    recorded: int
    replies: int
    delivered: int
    failed_attempts: int


class DeliveryStore(Protocol):
    """Inbound messages from arrival to answer, replies until delivered, turn leases.

    Shares the connection (and `transaction()`) of the `SessionStore` it goes with, so a
    turn's messages, its inbound message's state and its reply commit together.
    """

    def receive(self, chat: Chat, inbound: Inbound) -> StoredInbound | None:
        """Store an arriving message as pending; None when the chat already has a message
        with its platform id (a replayed update)."""
        ...

    def next_pending(self, chat_id: int, after_id: int = 0) -> StoredInbound | None:
        """The chat's oldest pending message newer than `after_id`."""
        ...

    def start_turn(self, inbound_id: int, message_id: int) -> None:
        """Link a pending message to its row in the history (stored as its turn starts)."""
        ...

    def finish(self, inbound_id: int, reply: Outbound | None) -> StoredReply | None:
        """Mark a pending message answered (with `reply`, kept until delivered) or recorded
        (no reply). Raises `LeaseLost` when it is no longer pending (another process
        answered it)."""
        ...

    def post(self, chat_id: int, message: Outbound, origin: str) -> StoredReply | None:
        """Store a message no inbound message started (a reminder) for delivery like a
        reply; None when the chat already has one from `origin` (stored once per origin)."""
        ...

    def undelivered(self, chat_id: int, max_attempts: int) -> list[StoredReply]:
        """The chat's replies not yet delivered and tried fewer than `max_attempts` times,
        oldest first."""
        ...

    def mark_delivered(self, reply_id: int) -> None: ...

    def record_failed_attempt(self, reply_id: int, error: str) -> None: ...

    def chats_awaiting(self, channels: list[str], max_attempts: int) -> list[int]:
        """Chats of `channels` with pending messages or undelivered replies (tried fewer
        than `max_attempts` times), in the order their oldest such row arrived."""
        ...

    def delivery_totals(self, channel: str | None = None) -> DeliveryTotals: ...

    # -- turn leases
    def claim_turn(
        self, chat_id: int, owner: str, expires_at: float, now: float, stale_owner: str = ""
    ) -> bool:
        """Take the chat's turn for `owner` when it is free, expired, already `owner`'s,
        or held by `stale_owner` (a process known to be gone); True when `owner` holds it."""
        ...

    def turn_holder(self, chat_id: int) -> TurnLease | None: ...

    def renew_turn(self, lease: TurnLease, expires_at: float) -> bool:
        """Extend a held lease; False when it is no longer the owner's."""
        ...

    def holds_turn(self, lease: TurnLease) -> bool:
        """Whether `lease` is still its owner's (call inside the committing transaction)."""
        ...

    def release_turn(self, lease: TurnLease) -> None: ...


# -- rows as records: the same columns on both engines (core/sqlite_*store.py, core/pg_*store.py)


def chat_from_row(row: tuple[Any, ...]) -> Chat:
    """(id, channel, external_chat_id, title, kind)"""
    return Chat(row[0], row[1], row[2], row[3] or "", row[4])


def message_from_row(row: tuple[Any, ...]) -> StoredMessage:
    """(id, chat_id, role, sender, content, tool_calls, tool_call_id, created_at,
    token_estimate, context)"""
    return StoredMessage(
        id=row[0],
        chat_id=row[1],
        role=row[2],
        sender=row[3] or "",
        content=row[4] or "",
        tool_calls=json.loads(row[5]) if row[5] else None,
        tool_call_id=row[6],
        created_at=row[7],
        token_estimate=row[8],
        context=row[9],
    )


def inbound_from_row(row: tuple[Any, ...]) -> StoredInbound:
    """(inbox id, platform_message_id, sender_id, sender_name, text, respond, message_id,
    chat id, channel, external_chat_id, title, kind, sender_is_admin, sent_at)"""
    chat = Chat(row[7], row[8], row[9], row[10] or "", row[11])
    inbound = Inbound(
        channel=chat.channel,
        chat_id=chat.external_chat_id,
        text=row[4],
        sender_id=row[2],
        sender_name=row[3],
        chat_kind=chat.kind,  # type: ignore[arg-type]  # stored from an Inbound's chat_kind
        chat_title=chat.title,
        respond=bool(row[5]),
        message_id=row[1] or "",
        sender_is_admin=bool(row[12]),
        sent_at=row[13] or "",
    )
    return StoredInbound(row[0], chat, inbound, row[6] or 0)


COMPACTION_COLUMNS = (
    "trigger, status, first_message_id, last_message_id, messages_compacted, tokens_before,"
    " tokens_after, summary_calls, archive_path, error"
)


def compaction_from_row(row: tuple[Any, ...]) -> CompactionRecord:
    """(trigger, status, first_message_id, last_message_id, messages_compacted,
    tokens_before, tokens_after, summary_calls, archive_path, error)"""
    return CompactionRecord(
        trigger=row[0],
        status=row[1],
        first_message_id=row[2],
        last_message_id=row[3],
        messages_compacted=row[4],
        tokens_before=row[5],
        tokens_after=row[6],
        summary_calls=row[7],
        archive_path=row[8],
        summary=None,
        error=row[9],
    )


def reply_from_row(row: tuple[Any, ...]) -> StoredReply:
    """(outbox id, channel, external_chat_id, text, reply_to, is_error, attempts)"""
    outbound = Outbound(row[1], row[2], row[3], reply_to=row[4], is_error=bool(row[5]))
    return StoredReply(row[0], outbound, row[6])
