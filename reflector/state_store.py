"""The reflector's own stores on either engine: cursors (`memory_reflector_state`), leases
(`reflector_leases`) and runs (`reflector_runs`), one SQL text over `core.storage.database`.

Leases: on PostgreSQL (workers on many machines) a claimant locks the first free lease row
of its due chats with `FOR UPDATE SKIP LOCKED` and writes itself in, so N workers never take
the same chat and never wait for each other; on SQLite one short write transaction per chat
tried (the single writer orders the claimants). A lease expires (`expires_at`, the
claimant's clock) and is renewed between batches; an expired one is taken over. A released
lease keeps its row, vacant (`owner` '' and `expires_at` 0).

Every method runs inside the caller's transaction when one is open (the pass's commit),
else on its own.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from core.storage.database import Database
from reflector.store import ChatRun, FailedAttempts, Lease, RunRow

# pg_advisory_xact_lock(namespace, key): the two-int form, so it never meets a lock taken
# with one bigint key; a chat id past 2**31 wraps (two chats then merely share a lock).
MEMORY_WRITES_LOCK = 0x6D656D77  # "memw": writers of one chat's memories, one at a time
_INT4 = 0x7FFFFFFF
RUN_COLUMNS = (
    "id, chat_id, started_at, finished_at, messages_seen, memories_added, memories_updated,"
    " memories_refreshed, memories_skipped, model, ok, error, first_message_id,"
    " last_message_id, status, batch_failed, skip_reasons"
)


def chat_lock_key(chat_id: int) -> int:
    """The second half of a per-chat advisory lock key (an int4)."""
    return chat_id & _INT4


def new_owner_id() -> str:
    """A token unique to one claim: host, process and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


class DatabaseCursorStore:
    """Reads and moves `memory_reflector_state`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def position(self, chat_id: int) -> int:
        row = self.db.read_one(
            "SELECT last_message_id FROM memory_reflector_state WHERE chat_id = ?", (chat_id,)
        )
        return int(row[0]) if row else 0

    def pending_chats(self, chat_ids: Sequence[int] | None = None) -> list[int]:
        """Chats with messages newer than their cursor, oldest cursor first: one query,
        one probe of the (chat_id, id) index per chat."""
        if chat_ids is not None and not chat_ids:
            return []
        where, params = "", ()
        if chat_ids is not None:
            condition, params = self.db.dialect.in_values("c.id", list(chat_ids))
            where = f"{condition} AND"
        rows = self.db.read(
            "SELECT c.id FROM chats c LEFT JOIN memory_reflector_state s ON s.chat_id = c.id"
            f" WHERE {where} EXISTS (SELECT 1 FROM messages m WHERE m.chat_id = c.id"
            " AND m.id > coalesce(s.last_message_id, 0))"
            " ORDER BY coalesce(s.updated_at, ''), c.id",
            params,
        )
        return [int(row[0]) for row in rows]

    def advance(self, chat_id: int, expected: int, new: int) -> bool:
        """Move the cursor from `expected` to `new` in one statement; False if someone else
        moved it first (a concurrent mover waits for the row, then finds it moved)."""
        if expected == 0:  # no row yet means position 0
            moved = self.db.write(
                "INSERT INTO memory_reflector_state (chat_id, last_message_id) VALUES (?, ?)"
                " ON CONFLICT (chat_id) DO UPDATE SET last_message_id = excluded.last_message_id,"
                " updated_at = mnemo_now() WHERE memory_reflector_state.last_message_id = 0",
                (chat_id, new),
            )
        else:
            moved = self.db.write(
                "UPDATE memory_reflector_state SET last_message_id = ?, updated_at = mnemo_now()"
                " WHERE chat_id = ? AND last_message_id = ?",
                (new, chat_id, expected),
            )
        return moved == 1

    def reset(self, chat_id: int, position: int = 0) -> None:
        """Set the cursor (tests, benchmarks, and re-reflecting a chat from scratch)."""
        self.db.write(
            "INSERT INTO memory_reflector_state (chat_id, last_message_id) VALUES (?, ?)"
            " ON CONFLICT (chat_id) DO UPDATE SET last_message_id = excluded.last_message_id,"
            " updated_at = mnemo_now()",
            (chat_id, position),
        )

    def forget_chat(self, chat_id: int) -> None:
        self.db.write("DELETE FROM memory_reflector_state WHERE chat_id = ?", (chat_id,))


class DatabaseLeaseStore:
    """Claim (skipping what others are claiming), renew, check and release leases."""

    def __init__(
        self, db: Database, lease_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.db = db
        self.lease_s = lease_s
        self.clock = clock

    def claim(self, chat_id: int) -> Lease | None:
        """The lease on `chat_id` for a new owner, or None while another owner holds it."""
        if self.db.dialect.row_locks:
            return self._claim_skipping_locked([chat_id])
        owner, now = new_owner_id(), self.clock()
        expires = now + self.lease_s
        row = self.db.read_one(
            "INSERT INTO reflector_leases AS lease (chat_id, owner, expires_at) VALUES (?, ?, ?)"
            " ON CONFLICT (chat_id) DO UPDATE SET owner = excluded.owner,"
            " expires_at = excluded.expires_at WHERE lease.expires_at <= ? RETURNING chat_id",
            (chat_id, owner, expires, now),
        )
        return Lease(chat_id, owner, expires) if row else None

    def claim_next(self, chat_ids: Sequence[int]) -> Lease | None:
        """The lease on the first chat of `chat_ids` (in their order) no other owner holds."""
        if self.db.dialect.row_locks:
            return self._claim_skipping_locked(chat_ids)
        for chat_id in chat_ids:
            lease = self.claim(chat_id)
            if lease is not None:
                return lease
        return None

    def _claim_skipping_locked(self, chat_ids: Sequence[int]) -> Lease | None:
        """Vacant rows for chats never leased, then the first free row locked with SKIP
        LOCKED and taken, in one short transaction (PostgreSQL)."""
        if not chat_ids:
            return None
        owner, now = new_owner_id(), self.clock()
        expires = now + self.lease_s
        ids = list(chat_ids)
        with self.db.transaction():
            self.db.write(
                "INSERT INTO reflector_leases (chat_id, owner, expires_at)"
                " SELECT id, '', 0 FROM unnest(CAST(? AS bigint[])) AS id"
                " ON CONFLICT (chat_id) DO NOTHING",
                (ids,),
            )
            row = self.db.read_one(
                "WITH next AS (SELECT l.chat_id"
                " FROM unnest(CAST(? AS bigint[])) WITH ORDINALITY AS due (chat_id, place)"
                " JOIN reflector_leases l ON l.chat_id = due.chat_id"
                " WHERE l.expires_at <= ? ORDER BY due.place LIMIT 1"
                " FOR UPDATE OF l SKIP LOCKED)"
                " UPDATE reflector_leases l SET owner = ?, expires_at = ?"
                " FROM next WHERE l.chat_id = next.chat_id RETURNING l.chat_id",
                (ids, now, owner, expires),
            )
        return Lease(int(row[0]), owner, expires) if row else None

    def renew(self, lease: Lease) -> Lease | None:
        expires = self.clock() + self.lease_s
        renewed = self.db.write(
            "UPDATE reflector_leases SET expires_at = ? WHERE chat_id = ? AND owner = ?",
            (expires, lease.chat_id, lease.owner),
        )
        return Lease(lease.chat_id, lease.owner, expires) if renewed == 1 else None

    def holds(self, lease: Lease) -> bool:
        """Whether `lease` is still this owner's (call inside the committing transaction: on
        PostgreSQL the row stays locked until it ends, so nobody takes the chat over while
        its pass commits)."""
        row = self.db.read_one(
            "SELECT 1 FROM reflector_leases WHERE chat_id = ? AND owner = ?"
            + self.db.dialect.for_update,
            (lease.chat_id, lease.owner),
        )
        return row is not None

    def lock_chat_writes(self, chat_id: int) -> None:
        """A transaction-scoped advisory lock on the chat's memory writes on PostgreSQL
        (released at COMMIT or ROLLBACK; a crashed holder's goes with its connection). On
        SQLite nothing to do: BEGIN IMMEDIATE already made every other writer wait."""
        if self.db.dialect.row_locks:
            self.db.read(
                "SELECT pg_advisory_xact_lock(?, ?)", (MEMORY_WRITES_LOCK, chat_lock_key(chat_id))
            )

    def release(self, lease: Lease) -> None:
        self.db.write(
            "UPDATE reflector_leases SET owner = '', expires_at = 0"
            " WHERE chat_id = ? AND owner = ?",
            (lease.chat_id, lease.owner),
        )

    def forget_chat(self, chat_id: int) -> None:
        self.db.write("DELETE FROM reflector_leases WHERE chat_id = ?", (chat_id,))


class DatabaseRunStore:
    """Writes and reads `reflector_runs`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record(self, run: ChatRun) -> int:
        """Insert the run's row; return its id."""
        row = self.db.read_one(
            "INSERT INTO reflector_runs (chat_id, started_at, first_message_id, last_message_id,"
            " messages_seen, memories_added, memories_updated, memories_refreshed,"
            " memories_skipped, model, prompt_tokens, completion_tokens, ok, error, status,"
            " batch_failed, skip_reasons)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            run_values(run),
        )
        assert row is not None
        return int(row[0])

    def recent(self, chat_id: int | None = None, limit: int = 20) -> list[RunRow]:
        """The newest runs, newest first (of one chat if given)."""
        where = "WHERE chat_id = ?" if chat_id is not None else ""
        params: tuple[int, ...] = (chat_id, limit) if chat_id is not None else (limit,)
        rows = self.db.read(
            f"SELECT {RUN_COLUMNS} FROM reflector_runs {where} ORDER BY id DESC LIMIT ?", params
        )
        return [run_row(row) for row in rows]

    def failed_attempts(self, chat_id: int, first_message_id: int) -> FailedAttempts:
        """Batch failures of runs starting at `first_message_id`, counted since the chat's
        newest done or skipped run (so a cursor reset starts afresh); one query on the
        (chat_id, id) index."""
        rows = self.db.read(
            "SELECT messages_seen FROM reflector_runs WHERE chat_id = ? AND batch_failed = 1"
            " AND first_message_id = ? AND id > coalesce((SELECT max(id) FROM reflector_runs"
            " WHERE chat_id = ? AND status IN ('done', 'skipped')), 0) ORDER BY id DESC",
            (chat_id, first_message_id, chat_id),
        )
        return FailedAttempts(len(rows), int(rows[0][0]) if rows else 0)

    def count(self, chat_id: int) -> int:
        row = self.db.read_one("SELECT count(*) FROM reflector_runs WHERE chat_id = ?", (chat_id,))
        return int(row[0]) if row else 0

    def forget_chat(self, chat_id: int) -> int:
        return self.db.write("DELETE FROM reflector_runs WHERE chat_id = ?", (chat_id,))


def run_values(run: ChatRun) -> tuple[Any, ...]:
    """The `reflector_runs` values of `run`, in `record`'s column order."""
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
