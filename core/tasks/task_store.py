"""TaskStore: the `scheduled_tasks` and `chat_timezones` tables on either engine, one SQL
text over `core.storage.database`.

A due task is claimed with a lease: one `UPDATE … WHERE <active, due, lease free or
expired> … RETURNING`. On PostgreSQL the candidates are picked `FOR UPDATE SKIP LOCKED` and
the outer `WHERE` is checked again on the row it locks, so of two processes claiming at
once each task goes to exactly one; SQLite's single writer does the same. A run's outcome
(`finish_run`) is written only while the lease is still the claimer's, in the caller's
transaction together with the message it sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.api import Chat
from core.storage.database import Database

TASK_COLUMNS = (
    "t.id, t.creator_id, t.creator_name, t.mode, t.text, t.schedule_kind, t.expression,"
    " t.timezone, t.next_run_at, t.status, t.failures, t.runs, t.created_at, t.last_run_at,"
    " t.last_error, c.id, c.channel, c.external_chat_id, c.title, c.kind"
)
OPEN = ("active", "paused")


@dataclass(frozen=True)
class TaskRequest:
    """What a task's creator asked for: who, the mode, the text and the schedule."""

    creator_id: str
    creator_name: str
    mode: str
    text: str
    schedule_kind: str
    expression: str
    timezone: str


@dataclass(frozen=True)
class NewTask(TaskRequest):
    """A task as `schedule_task` asks for it (its schedule already checked)."""

    chat_id: int
    next_run_at: float


@dataclass(frozen=True)
class ScheduledTask(TaskRequest):
    """One row of `scheduled_tasks` with its chat."""

    id: int
    chat: Chat
    next_run_at: float | None
    status: str
    failures: int
    runs: int
    created_at: str
    last_run_at: float | None
    last_error: str


@dataclass(frozen=True)
class RunOutcome:
    """What a fired (or missed, or failed) run leaves: when next, in which state."""

    next_run_at: float | None
    status: str
    failures: int
    ran: bool
    last_error: str = ""


def _task(row: tuple[Any, ...]) -> ScheduledTask:
    """A row selected as `TASK_COLUMNS` (both engines), in the fields' order: the
    `TaskRequest` (columns 1-7), then the row's own."""
    chat = Chat(int(row[15]), row[16], row[17], row[18], row[19])
    next_run = float(row[8]) if row[8] is not None else None
    last_run = float(row[13]) if row[13] is not None else None
    return ScheduledTask(row[1], row[2], row[3], row[4], row[5], row[6], row[7], int(row[0]),
                         chat, next_run, row[9], int(row[10]), int(row[11]), str(row[12]),
                         last_run, row[14])  # fmt: skip


class TaskStore:
    """Scheduled tasks and chats' time zones on a `Database` (sharing its transaction)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- tasks as a chat sees them ---------------------------------------------------------

    def add(self, new: NewTask) -> ScheduledTask:
        row = self.db.read_one(
            "INSERT INTO scheduled_tasks (chat_id, creator_id, creator_name, mode, text,"
            " schedule_kind, expression, timezone, next_run_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (new.chat_id, new.creator_id, new.creator_name, new.mode, new.text,
             new.schedule_kind, new.expression, new.timezone, new.next_run_at),
        )  # fmt: skip
        assert row is not None
        found = self.get(int(row[0]))
        assert found is not None
        return found

    def active_count(self, chat_id: int) -> int:
        row = self.db.read_one(
            "SELECT count(*) FROM scheduled_tasks WHERE chat_id = ? AND status = 'active'",
            (chat_id,),
        )
        return int(row[0]) if row else 0

    def get(self, task_id: int) -> ScheduledTask | None:
        row = self.db.read_one(
            f"SELECT {TASK_COLUMNS} FROM scheduled_tasks t JOIN chats c ON c.id = t.chat_id"
            " WHERE t.id = ?",
            (task_id,),
        )
        return _task(row) if row else None

    def for_chat(self, chat_id: int, open_only: bool = True) -> list[ScheduledTask]:
        """The chat's tasks, soonest first (finished ones after, newest first)."""
        rows = self.db.read(
            f"SELECT {TASK_COLUMNS} FROM scheduled_tasks t JOIN chats c ON c.id = t.chat_id"
            " WHERE t.chat_id = ? AND (t.status IN ('active', 'paused') OR ? = 0)"
            " ORDER BY t.next_run_at IS NULL, t.next_run_at, t.id DESC",
            (chat_id, int(open_only)),
        )
        return [_task(row) for row in rows]

    def every_task(self, open_only: bool = True, limit: int = 500) -> list[ScheduledTask]:
        """Every chat's tasks (`mnemo tasks list`, the dashboard), soonest first."""
        rows = self.db.read(
            f"SELECT {TASK_COLUMNS} FROM scheduled_tasks t JOIN chats c ON c.id = t.chat_id"
            " WHERE t.status IN ('active', 'paused') OR ? = 0"
            " ORDER BY t.next_run_at IS NULL, t.next_run_at, t.id DESC LIMIT ?",
            (int(open_only), limit),
        )
        return [_task(row) for row in rows]

    def cancel(self, task_id: int, chat_id: int | None = None) -> bool:
        """Cancel an active or paused task (of `chat_id` when given); False if none was."""
        changed = self.db.write(
            "UPDATE scheduled_tasks SET status = 'cancelled', next_run_at = NULL,"
            " lease_owner = NULL, lease_expires = NULL"
            " WHERE id = ? AND status IN ('active', 'paused')"
            " AND chat_id = coalesce(CAST(? AS BIGINT), chat_id)",
            (task_id, chat_id),
        )
        return changed == 1

    def run_worked(self, task_id: int) -> None:
        """A `run` task's turn answered: its consecutive failures start again from 0."""
        self.db.write("UPDATE scheduled_tasks SET failures = 0 WHERE id = ?", (task_id,))

    def delete_for_chat(self, chat_id: int) -> int:
        with self.db.transaction():
            self.db.write("DELETE FROM chat_timezones WHERE chat_id = ?", (chat_id,))
            return self.db.write("DELETE FROM scheduled_tasks WHERE chat_id = ?", (chat_id,))

    def count_for_chat(self, chat_id: int) -> int:
        row = self.db.read_one("SELECT count(*) FROM scheduled_tasks WHERE chat_id = ?", (chat_id,))
        return int(row[0]) if row else 0

    def status_counts(self, overdue_before: float) -> dict[str, int]:
        """How many tasks are active, paused, and active but due before `overdue_before`
        (not fired: no runner runs, or it fails)."""
        row = self.db.read_one(
            "SELECT count(*) FILTER (WHERE status = 'active'),"
            " count(*) FILTER (WHERE status = 'paused'),"
            " count(*) FILTER (WHERE status = 'active' AND next_run_at < ?)"
            " FROM scheduled_tasks",
            (overdue_before,),
        )
        assert row is not None
        return {"active": int(row[0]), "paused": int(row[1]), "overdue": int(row[2])}

    # -- time zones ----------------------------------------------------------------------

    def timezone_of(self, chat_id: int) -> str | None:
        row = self.db.read_one("SELECT timezone FROM chat_timezones WHERE chat_id = ?", (chat_id,))
        return str(row[0]) if row else None

    def set_timezone(self, chat_id: int, timezone: str) -> None:
        self.db.write(
            "INSERT INTO chat_timezones (chat_id, timezone) VALUES (?, ?)"
            " ON CONFLICT (chat_id) DO UPDATE SET timezone = excluded.timezone",
            (chat_id, timezone),
        )

    # -- the runner ----------------------------------------------------------------------

    def next_due_at(self, now: float) -> float | None:
        """When the next claim may find work (seconds since the epoch), or None: the soonest
        due time of a free task, or the lease expiry of a leased one (its claimer may die)."""
        row = self.db.read_one(
            "SELECT min(CASE WHEN lease_owner IS NULL OR lease_expires <= ? THEN next_run_at"
            " WHEN lease_expires > next_run_at THEN lease_expires ELSE next_run_at END)"
            " FROM scheduled_tasks WHERE status = 'active'",
            (now,),
        )
        return float(row[0]) if row and row[0] is not None else None

    def claim_due(
        self, owner: str, now: float, lease_until: float, limit: int
    ) -> list[ScheduledTask]:
        """Lease up to `limit` active tasks due at `now` whose lease is free or expired."""
        dialect = self.db.dialect
        skip_locked = dialect.for_update + (" SKIP LOCKED" if dialect.row_locks else "")
        free = "(lease_owner IS NULL OR lease_expires <= ?)"
        rows = self.db.read(
            "UPDATE scheduled_tasks SET lease_owner = ?, lease_expires = ?"
            f" WHERE status = 'active' AND next_run_at <= ? AND {free} AND id IN ("
            " SELECT id FROM scheduled_tasks WHERE status = 'active' AND next_run_at <= ?"
            f" AND {free} ORDER BY next_run_at LIMIT ?{skip_locked})"
            " RETURNING id",
            (owner, lease_until, now, now, now, now, limit),
        )
        if not rows:
            return []
        in_claimed, params = dialect.in_values("t.id", [int(row[0]) for row in rows])
        claimed = self.db.read(
            f"SELECT {TASK_COLUMNS} FROM scheduled_tasks t JOIN chats c ON c.id = t.chat_id"
            f" WHERE {in_claimed} ORDER BY t.next_run_at, t.id",
            params,
        )
        return [_task(row) for row in claimed]

    def finish_run(self, task_id: int, owner: str, outcome: RunOutcome, now: float) -> bool:
        """Record a claimed run's outcome and free the lease, only while `owner` holds it
        (call in the transaction that stores the run's message); False when it does not."""
        changed = self.db.write(
            "UPDATE scheduled_tasks SET next_run_at = ?, status = ?, failures = ?,"
            " runs = runs + ?, last_run_at = CASE WHEN ? = 1 THEN ? ELSE last_run_at END,"
            " last_error = ?, lease_owner = NULL, lease_expires = NULL"
            " WHERE id = ? AND lease_owner = ? AND status = 'active'",
            (outcome.next_run_at, outcome.status, outcome.failures, int(outcome.ran),
             int(outcome.ran), now, outcome.last_error[:500], task_id, owner),
        )  # fmt: skip
        return changed == 1

    def release(self, task_id: int, owner: str) -> None:
        self.db.write(
            "UPDATE scheduled_tasks SET lease_owner = NULL, lease_expires = NULL"
            " WHERE id = ? AND lease_owner = ?",
            (task_id, owner),
        )
