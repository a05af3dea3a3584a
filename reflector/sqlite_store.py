"""The reflector's stores on SQLite: cursors (`memory_reflector_state`), leases
(`reflector_leases`, claimed inside BEGIN IMMEDIATE so of two claimants exactly one wins;
an expired lease of a crashed process can be taken over) and runs (`reflector_runs`)."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from core.db import Connection, transaction
from reflector.store import ChatRun, FailedAttempts, Lease, RunRow

_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"


class SqliteCursorStore:
    """Reads and moves `memory_reflector_state`; every query is an index lookup per chat."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def position(self, chat_id: int) -> int:
        row = self.conn.execute(
            "SELECT last_message_id FROM memory_reflector_state WHERE chat_id = ?", (chat_id,)
        ).fetchone()
        return int(row[0]) if row else 0

    def pending_chats(self, chat_ids: Sequence[int] | None = None) -> list[int]:
        """Chats with messages newer than their cursor, oldest cursor first.

        `max(id)` per chat is answered from the (chat_id, id) index, so this costs one
        lookup per chat whatever the history length.
        """
        where = ""
        params: tuple[int, ...] = ()
        if chat_ids is not None:
            if not chat_ids:
                return []
            where = f"WHERE c.id IN ({', '.join('?' * len(chat_ids))})"
            params = tuple(chat_ids)
        rows = self.conn.execute(
            "SELECT c.id, coalesce(s.last_message_id, 0) AS done,"
            " (SELECT max(m.id) FROM messages m WHERE m.chat_id = c.id) AS newest"
            f" FROM chats c LEFT JOIN memory_reflector_state s ON s.chat_id = c.id {where}"
            " ORDER BY coalesce(s.updated_at, ''), c.id",
            params,
        ).fetchall()
        return [int(row[0]) for row in rows if row[2] is not None and row[2] > row[1]]

    def advance(self, chat_id: int, expected: int, new: int) -> bool:
        """Move the cursor from `expected` to `new`; False if someone else moved it first.

        Call inside the transaction that stores the pass's memories.
        """
        if expected == 0:
            self.conn.execute(
                "INSERT OR IGNORE INTO memory_reflector_state (chat_id, last_message_id)"
                " VALUES (?, 0)",
                (chat_id,),
            )
        cursor = self.conn.execute(
            f"UPDATE memory_reflector_state SET last_message_id = ?, updated_at = {_NOW}"
            " WHERE chat_id = ? AND last_message_id = ?",
            (new, chat_id, expected),
        )
        return int(cursor.rowcount) == 1

    def reset(self, chat_id: int, position: int = 0) -> None:
        """Set the cursor (tests, benchmarks, and re-reflecting a chat from scratch)."""
        self.conn.execute(
            "INSERT INTO memory_reflector_state (chat_id, last_message_id) VALUES (?, ?)"
            f" ON CONFLICT (chat_id) DO UPDATE SET last_message_id = excluded.last_message_id,"
            f" updated_at = {_NOW}",
            (chat_id, position),
        )

    def forget_chat(self, chat_id: int) -> None:
        self.conn.execute("DELETE FROM memory_reflector_state WHERE chat_id = ?", (chat_id,))


def new_owner_id() -> str:
    """A token unique to one claim: host, process and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


class SqliteLeaseStore:
    """Claim, check and release `reflector_leases` rows."""

    def __init__(
        self, conn: Connection, lease_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.conn = conn
        self.lease_s = lease_s
        self.clock = clock

    def claim(self, chat_id: int) -> Lease | None:
        """The lease on `chat_id` for a new owner, or None while another owner holds it."""
        owner = new_owner_id()
        now = self.clock()
        expires = now + self.lease_s
        with transaction(self.conn):
            self.conn.execute(
                "INSERT INTO reflector_leases (chat_id, owner, expires_at) VALUES (?, ?, ?)"
                " ON CONFLICT (chat_id) DO UPDATE SET owner = excluded.owner,"
                " expires_at = excluded.expires_at WHERE reflector_leases.expires_at <= ?",
                (chat_id, owner, expires, now),
            )
            row = self.conn.execute(
                "SELECT owner FROM reflector_leases WHERE chat_id = ?", (chat_id,)
            ).fetchone()
        return Lease(chat_id, owner, expires) if row and row[0] == owner else None

    def claim_next(self, chat_ids: Sequence[int]) -> Lease | None:
        """The lease on the first of `chat_ids` no other owner holds (one short write
        transaction per chat tried; SQLite's single writer orders the claimants)."""
        for chat_id in chat_ids:
            lease = self.claim(chat_id)
            if lease is not None:
                return lease
        return None

    def renew(self, lease: Lease) -> Lease | None:
        expires = self.clock() + self.lease_s
        with transaction(self.conn):
            cursor = self.conn.execute(
                "UPDATE reflector_leases SET expires_at = ? WHERE chat_id = ? AND owner = ?",
                (expires, lease.chat_id, lease.owner),
            )
        return Lease(lease.chat_id, lease.owner, expires) if cursor.rowcount == 1 else None

    def holds(self, lease: Lease) -> bool:
        """Whether `lease` is still this owner's (call inside the committing transaction)."""
        row = self.conn.execute(
            "SELECT 1 FROM reflector_leases WHERE chat_id = ? AND owner = ?",
            (lease.chat_id, lease.owner),
        ).fetchone()
        return row is not None

    def lock_chat_writes(self, chat_id: int) -> None:
        """Nothing to do: BEGIN IMMEDIATE already made every other writer wait."""

    def release(self, lease: Lease) -> None:
        self.conn.execute(
            "DELETE FROM reflector_leases WHERE chat_id = ? AND owner = ?",
            (lease.chat_id, lease.owner),
        )

    def forget_chat(self, chat_id: int) -> None:
        self.conn.execute("DELETE FROM reflector_leases WHERE chat_id = ?", (chat_id,))


RUN_COLUMNS = (
    "id, chat_id, started_at, finished_at, messages_seen, memories_added, memories_updated,"
    " memories_refreshed, memories_skipped, model, ok, error, first_message_id,"
    " last_message_id, status, batch_failed, skip_reasons"
)


class SqliteRunStore:
    """Writes and reads `reflector_runs`."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def record(self, run: ChatRun) -> int:
        """Insert the run's row; return its id."""
        cursor = self.conn.execute(
            "INSERT INTO reflector_runs (chat_id, started_at, first_message_id, last_message_id,"
            " messages_seen, memories_added, memories_updated, memories_refreshed,"
            " memories_skipped, model, prompt_tokens, completion_tokens, ok, error, status,"
            " batch_failed, skip_reasons)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            run_values(run),
        )
        return int(cursor.lastrowid)

    def recent(self, chat_id: int | None = None, limit: int = 20) -> list[RunRow]:
        """The newest runs, newest first (of one chat if given)."""
        where = "WHERE chat_id = ?" if chat_id is not None else ""
        params: tuple[int, ...] = (chat_id, limit) if chat_id is not None else (limit,)
        rows = self.conn.execute(
            f"SELECT {RUN_COLUMNS} FROM reflector_runs {where} ORDER BY id DESC LIMIT ?",
            params,
        ).fetchall()
        return [run_row(row) for row in rows]

    def failed_attempts(self, chat_id: int, first_message_id: int) -> FailedAttempts:
        """Batch failures of runs starting at `first_message_id`, counted since the chat's
        newest done or skipped run (so a cursor reset starts afresh)."""
        rows = self.conn.execute(
            "SELECT messages_seen FROM reflector_runs WHERE chat_id = ? AND batch_failed = 1"
            " AND first_message_id = ? AND id > coalesce((SELECT max(id) FROM reflector_runs"
            " WHERE chat_id = ? AND status IN ('done', 'skipped')), 0) ORDER BY id DESC",
            (chat_id, first_message_id, chat_id),
        ).fetchall()
        return FailedAttempts(len(rows), int(rows[0][0]) if rows else 0)

    def count(self, chat_id: int) -> int:
        row = self.conn.execute("SELECT count(*) FROM reflector_runs WHERE chat_id = ?", (chat_id,))
        return int(row.fetchone()[0])

    def forget_chat(self, chat_id: int) -> int:
        gone = self.conn.execute("DELETE FROM reflector_runs WHERE chat_id = ?", (chat_id,))
        return int(gone.rowcount)


def run_values(run: ChatRun) -> tuple[Any, ...]:
    """The `reflector_runs` values of `run`, in `record`'s column order (both engines)."""
    return (
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
        run.status if run.status in ("done", "skipped") else "failed",
        int(run.batch_failed),
        run.skip_text(),
    )


def run_row(row: tuple[Any, ...]) -> RunRow:
    """A `reflector_runs` row selected as `RUN_COLUMNS` (both engines)."""
    return RunRow(
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
        row[12],
        row[13],
        row[14],
        bool(row[15]),
        row[16] or "",
    )
