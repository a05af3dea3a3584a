"""RunLog: one `reflector_runs` row per chat per pass, successful or not."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from core.db import Connection


def utc_now() -> str:
    """The timestamp format every Mnemo table uses."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass
class ChatRun:
    """What one pass did in one chat (filled in as the pass goes)."""

    chat_id: int
    started_at: str = field(default_factory=utc_now)
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
    status: str = "pending"  # done | failed | busy | idle
    notes: list[str] = field(default_factory=list)  # what pass contributors did

    def summary(self) -> str:
        """One line for `mnemo reflect --once` and the log."""
        if self.status == "busy":
            return f"chat {self.chat_id}: skipped (another process is reflecting on it)"
        if self.status == "idle":
            return f"chat {self.chat_id}: no new messages"
        head = f"chat {self.chat_id}: {self.messages_seen} messages"
        if not self.ok:
            return f"{head}, FAILED: {self.error}"
        notes = "".join(f"; {note}" for note in self.notes)
        return (
            f"{head} (ids {self.first_message_id}-{self.last_message_id}), "
            f"{self.added} added, {self.updated} updated, {self.refreshed} refreshed, "
            f"{self.skipped} skipped{notes}"
        )


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


class RunLog:
    """Writes and reads `reflector_runs`."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def record(self, run: ChatRun) -> int:
        """Insert the run's row; return its id."""
        cursor = self.conn.execute(
            "INSERT INTO reflector_runs (chat_id, started_at, first_message_id, last_message_id,"
            " messages_seen, memories_added, memories_updated, memories_refreshed,"
            " memories_skipped, model, prompt_tokens, completion_tokens, ok, error)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run.chat_id,
                run.started_at,
                run.first_message_id,
                run.last_message_id,
                run.messages_seen,
                run.added,
                run.updated,
                run.refreshed,
                run.skipped,
                run.model,
                run.prompt_tokens,
                run.completion_tokens,
                int(run.ok),
                run.error,
            ),
        )
        return int(cursor.lastrowid)

    def recent(self, chat_id: int | None = None, limit: int = 20) -> list[RunRow]:
        """The newest runs, newest first (of one chat if given)."""
        where = "WHERE chat_id = ?" if chat_id is not None else ""
        params: tuple[int, ...] = (chat_id, limit) if chat_id is not None else (limit,)
        rows = self.conn.execute(
            "SELECT id, chat_id, started_at, finished_at, messages_seen, memories_added,"
            " memories_updated, memories_refreshed, memories_skipped, model, ok, error"
            f" FROM reflector_runs {where} ORDER BY id DESC LIMIT ?",
            params,
        ).fetchall()
        return [
            RunRow(
                int(row[0]),
                int(row[1]),
                row[2],
                row[3],
                int(row[4]),
                int(row[5]),
                int(row[6]),
                int(row[7]),
                int(row[8]),
                row[9],
                bool(row[10]),
                row[11],
            )
            for row in rows
        ]
