"""The reflector's storage interface: per-chat cursors, leases and the log of runs.

`reflector.state_store` holds their one implementation over `core.storage.database` (both
engines); `reflector.stores` builds them for a `Storage`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from core.clock import now_iso


@dataclass(frozen=True)
class Lease:
    chat_id: int
    owner: str
    expires_at: float


@dataclass
class ChatRun:
    """What one pass did in one chat (filled in as the pass goes)."""

    chat_id: int
    started_at: str = field(default_factory=now_iso)
    first_message_id: int | None = None
    last_message_id: int | None = None
    messages_seen: int = 0
    added: int = 0
    updated: int = 0
    refreshed: int = 0
    skipped: int = 0
    model: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ok: bool = False
    error: str | None = None
    status: str = "pending"  # done | failed | skipped | busy | idle
    # The messages themselves failed (overflow, cut or unusable reply), not the server:
    # such failures count towards `[reflector] max_attempts`, then the batch is skipped.
    batch_failed: bool = False
    notes: list[str] = field(default_factory=list)  # what pass contributors did
    # Why facts were not stored: {reason: how many}; their sum is `skipped`.
    skip_reasons: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str, count: int = 1) -> None:
        """Count `count` facts not stored, for `reason` (a short kind: "ungrounded")."""
        if count > 0:
            self.skipped += count
            self.skip_reasons[reason] = self.skip_reasons.get(reason, 0) + count

    def skip_text(self) -> str:
        """The reasons as stored and shown: "2 ungrounded, 1 small talk" ('' for none)."""
        return skip_text(self.skip_reasons)

    def summary(self) -> str:
        """One line for `mnemo reflect --once` and the log."""
        if self.status == "busy":
            return f"chat {self.chat_id}: busy (another process is reflecting on it)"
        if self.status == "idle":
            return f"chat {self.chat_id}: no new messages"
        head = f"chat {self.chat_id}: {self.messages_seen} messages"
        ids = f" (ids {self.first_message_id}-{self.last_message_id})"
        if self.status == "skipped":
            return f"{head}{ids} SKIPPED: {self.error}"
        if not self.ok:
            return f"{head}{ids if self.first_message_id else ''}, FAILED: {self.error}"
        notes = "".join(f"; {note}" for note in self.notes)
        return (
            f"{head}{ids}, "
            f"{self.added} added, {self.updated} updated, {self.refreshed} refreshed, "
            f"{skipped_phrase(self.skipped, self.skip_text())}{notes}"
        )


def skip_text(reasons: dict[str, int]) -> str:
    """{reason: count} as one line, the most frequent first."""
    ordered = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{count} {reason}" for reason, count in ordered)


def skipped_phrase(skipped: int, reasons: str) -> str:
    """ "3 skipped (2 ungrounded, 1 small talk)"; a count stored before reasons were kept
    says so."""
    if not skipped:
        return "0 skipped"
    return f"{skipped} skipped ({reasons or 'reason not recorded'})"


@dataclass(frozen=True)
class RunRow:
    id: int
    chat_id: int
    started_at: str
    finished_at: str
    messages_seen: int
    added: int
    updated: int
    refreshed: int
    skipped: int
    model: str
    ok: bool
    error: str | None
    first_message_id: int | None = None
    last_message_id: int | None = None
    status: str = "done"  # done | failed | skipped
    batch_failed: bool = False
    skip_reasons: str = ""  # "2 ungrounded, 1 small talk" (`ChatRun.skip_text`)

    @property
    def outcome(self) -> str:
        """ok, FAILED: why, or SKIPPED: why (what doctor and Health say of the last run)."""
        if self.status == "skipped":
            return f"SKIPPED: {self.error}"
        if not self.ok:
            return f"FAILED: {self.error}"
        if not self.skipped:
            return "ok"
        return f"ok, {skipped_phrase(self.skipped, self.skip_reasons)}"

    def summary(self) -> str:
        """One line of `mnemo reflect --runs`."""
        span = (
            f"ids {self.first_message_id}-{self.last_message_id}" if self.first_message_id else ""
        )
        head = f"#{self.id} {self.finished_at} chat {self.chat_id}: {self.messages_seen} messages"
        head += f" ({span})" if span else ""
        if self.status == "skipped" or not self.ok:
            return f"{head} {self.outcome}"
        return (
            f"{head}, {self.added} added, {self.updated} updated, {self.refreshed} refreshed, "
            f"{skipped_phrase(self.skipped, self.skip_reasons)}"
        )


@dataclass(frozen=True)
class FailedAttempts:
    """The batch failures at one cursor position since the chat's last completed batch."""

    count: int = 0
    last_seen: int = 0  # messages in the newest failed attempt


class CursorStore(Protocol):
    """Per chat, the id of the last message the reflector has handled."""

    def position(self, chat_id: int) -> int: ...

    def pending_chats(self, chat_ids: Sequence[int] | None = None) -> list[int]:
        """Chats with messages newer than their cursor, oldest cursor first."""
        ...

    def advance(self, chat_id: int, expected: int, new: int) -> bool:
        """Move the cursor from `expected` to `new`; False if someone else moved it first.

        Call inside the transaction that stores the pass's memories.
        """
        ...

    def reset(self, chat_id: int, position: int = 0) -> None: ...

    def forget_chat(self, chat_id: int) -> None:
        """Drop the chat's cursor (a deleted chat)."""
        ...


class LeaseStore(Protocol):
    """A chat claimed by one reflector pass at a time, across threads and processes."""

    def claim(self, chat_id: int) -> Lease | None:
        """The lease on `chat_id` for a new owner, or None while another owner holds it."""
        ...

    def claim_next(self, chat_ids: Sequence[int]) -> Lease | None:
        """The lease on the first of `chat_ids` that no other owner holds, or None when
        every one is held. Claimants never wait for each other (on PostgreSQL a chat being
        claimed elsewhere this instant is skipped), and no chat goes to two of them."""
        ...

    def renew(self, lease: Lease) -> Lease | None:
        """`lease` extended by the lease time from now, or None if it was taken over."""
        ...

    def holds(self, lease: Lease) -> bool:
        """Whether `lease` is still this owner's (call inside the committing transaction;
        on PostgreSQL it then stays this owner's until that transaction ends)."""
        ...

    def lock_chat_writes(self, chat_id: int) -> None:
        """Make every other writer that asks for this chat wait until the caller's
        transaction ends (call first in it): finding near-duplicates and inserting then
        happen as one step. SQLite's single writer does this already; PostgreSQL takes a
        transaction-scoped advisory lock."""
        ...

    def release(self, lease: Lease) -> None: ...

    def forget_chat(self, chat_id: int) -> None:
        """Drop the chat's lease, whoever holds it: a pass still working on a deleted chat
        then fails its `holds()` check and writes nothing."""
        ...


class RunStore(Protocol):
    """One row per batch: done, failed or skipped."""

    def record(self, run: ChatRun) -> int: ...

    def recent(self, chat_id: int | None = None, limit: int = 20) -> list[RunRow]:
        """The newest runs, newest first (of one chat if given)."""
        ...

    def failed_attempts(self, chat_id: int, first_message_id: int) -> FailedAttempts:
        """Batch failures (`batch_failed`) of runs starting at `first_message_id`, counted
        since the chat's newest done or skipped run (so a cursor reset starts afresh)."""
        ...

    def count(self, chat_id: int) -> int:
        """How many runs the chat has."""
        ...

    def forget_chat(self, chat_id: int) -> int:
        """Delete the chat's runs; return how many went."""
        ...
