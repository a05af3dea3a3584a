"""The reflector's stores on PostgreSQL: cursors (`memory_reflector_state`), leases
(`reflector_leases`) and runs (`reflector_runs`), for workers on many machines.

Leases: a claimant locks the first free lease row of its due chats with `FOR UPDATE SKIP
LOCKED` and writes itself in, so N workers never take the same chat and never wait for
each other (a row another claimant is writing is simply skipped). A lease expires as on
SQLite (`expires_at`, the claimant's clock) and is renewed between batches; an expired
one is taken over. A released lease keeps its row, vacant (`owner` '' and `expires_at` 0):
rows are only ever locked, never inserted, by racing claimants of a known chat.

Every method runs inside the caller's `PgDatabase.transaction()` when one is open (the
pass's commit), else on a connection of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from core.pg_db import PgDatabase
from reflector.sqlite_store import RUN_COLUMNS, new_owner_id, run_row, run_values
from reflector.store import ChatRun, FailedAttempts, Lease, RunRow

# pg_advisory_xact_lock(namespace, key): the two-int form, so it never meets a lock taken
# with one bigint key; a chat id past 2**31 wraps (two chats then merely share a lock).
MEMORY_WRITES_LOCK = 0x6D656D77  # "memw": writers of one chat's memories, one at a time
_INT4 = 0x7FFFFFFF


def chat_lock_key(chat_id: int) -> int:
    """The second half of a per-chat advisory lock key (an int4)."""
    return chat_id & _INT4


class PgCursorStore:
    """Reads and moves `memory_reflector_state`."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def position(self, chat_id: int) -> int:
        row = self.db.read_one(
            "SELECT last_message_id FROM memory_reflector_state WHERE chat_id = %s", (chat_id,)
        )
        return int(row[0]) if row else 0

    def pending_chats(self, chat_ids: Sequence[int] | None = None) -> list[int]:
        """Chats with messages newer than their cursor, oldest cursor first: one query,
        one probe of the (chat_id, id) index per chat."""
        if chat_ids is not None and not chat_ids:
            return []
        where = "" if chat_ids is None else "c.id = ANY(%s::bigint[]) AND"
        params: tuple[Any, ...] = () if chat_ids is None else (list(chat_ids),)
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
                "INSERT INTO memory_reflector_state (chat_id, last_message_id) VALUES (%s, %s)"
                " ON CONFLICT (chat_id) DO UPDATE SET last_message_id = excluded.last_message_id,"
                " updated_at = mnemo_now() WHERE memory_reflector_state.last_message_id = 0",
                (chat_id, new),
            )
        else:
            moved = self.db.write(
                "UPDATE memory_reflector_state SET last_message_id = %s, updated_at = mnemo_now()"
                " WHERE chat_id = %s AND last_message_id = %s",
                (new, chat_id, expected),
            )
        return moved == 1

    def reset(self, chat_id: int, position: int = 0) -> None:
        self.db.write(
            "INSERT INTO memory_reflector_state (chat_id, last_message_id) VALUES (%s, %s)"
            " ON CONFLICT (chat_id) DO UPDATE SET last_message_id = excluded.last_message_id,"
            " updated_at = mnemo_now()",
            (chat_id, position),
        )

    def forget_chat(self, chat_id: int) -> None:
        self.db.write("DELETE FROM memory_reflector_state WHERE chat_id = %s", (chat_id,))


class PgLeaseStore:
    """Claim (skipping what others are claiming), renew, check and release leases."""

    def __init__(
        self, db: PgDatabase, lease_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.db = db
        self.lease_s = lease_s
        self.clock = clock

    def claim(self, chat_id: int) -> Lease | None:
        return self.claim_next([chat_id])

    def claim_next(self, chat_ids: Sequence[int]) -> Lease | None:
        """The lease on the first free chat of `chat_ids` (in their order): vacant rows
        for chats never leased, then the first free row locked with SKIP LOCKED and taken,
        in one short transaction."""
        if not chat_ids:
            return None
        owner = new_owner_id()
        now = self.clock()
        expires = now + self.lease_s
        ids = list(chat_ids)
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO reflector_leases (chat_id, owner, expires_at)"
                " SELECT id, '', 0 FROM unnest(%s::bigint[]) AS id"
                " ON CONFLICT (chat_id) DO NOTHING",
                (ids,),
            )
            row = conn.execute(
                "WITH next AS (SELECT l.chat_id"
                " FROM unnest(%(ids)s::bigint[]) WITH ORDINALITY AS due (chat_id, place)"
                " JOIN reflector_leases l ON l.chat_id = due.chat_id"
                " WHERE l.expires_at <= %(now)s ORDER BY due.place LIMIT 1"
                " FOR UPDATE OF l SKIP LOCKED)"
                " UPDATE reflector_leases l SET owner = %(owner)s, expires_at = %(expires)s"
                " FROM next WHERE l.chat_id = next.chat_id RETURNING l.chat_id",
                {"ids": ids, "now": now, "owner": owner, "expires": expires},
            ).fetchone()
        return Lease(int(row[0]), owner, expires) if row else None

    def renew(self, lease: Lease) -> Lease | None:
        expires = self.clock() + self.lease_s
        renewed = self.db.write(
            "UPDATE reflector_leases SET expires_at = %s WHERE chat_id = %s AND owner = %s",
            (expires, lease.chat_id, lease.owner),
        )
        return Lease(lease.chat_id, lease.owner, expires) if renewed == 1 else None

    def holds(self, lease: Lease) -> bool:
        """Whether `lease` is still this owner's; the row stays locked until the caller's
        transaction ends, so nobody takes the chat over while its pass commits."""
        row = self.db.read_one(
            "SELECT 1 FROM reflector_leases WHERE chat_id = %s AND owner = %s FOR UPDATE",
            (lease.chat_id, lease.owner),
        )
        return row is not None

    def lock_chat_writes(self, chat_id: int) -> None:
        """A transaction-scoped advisory lock on the chat's memory writes (released at
        COMMIT or ROLLBACK; a crashed holder's goes with its connection)."""
        self.db.read(
            "SELECT pg_advisory_xact_lock(%s, %s)", (MEMORY_WRITES_LOCK, chat_lock_key(chat_id))
        )

    def release(self, lease: Lease) -> None:
        self.db.write(
            "UPDATE reflector_leases SET owner = '', expires_at = 0"
            " WHERE chat_id = %s AND owner = %s",
            (lease.chat_id, lease.owner),
        )

    def forget_chat(self, chat_id: int) -> None:
        self.db.write("DELETE FROM reflector_leases WHERE chat_id = %s", (chat_id,))


class PgRunStore:
    """Writes and reads `reflector_runs`."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def record(self, run: ChatRun) -> int:
        """Insert the run's row; return its id."""
        row = self.db.read_one(
            "INSERT INTO reflector_runs (chat_id, started_at, first_message_id, last_message_id,"
            " messages_seen, memories_added, memories_updated, memories_refreshed,"
            " memories_skipped, model, prompt_tokens, completion_tokens, ok, error, status,"
            " batch_failed, skip_reasons)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " RETURNING id",
            run_values(run),
        )
        assert row is not None
        return int(row[0])

    def recent(self, chat_id: int | None = None, limit: int = 20) -> list[RunRow]:
        """The newest runs, newest first (of one chat if given)."""
        where = "WHERE chat_id = %s" if chat_id is not None else ""
        params: tuple[int, ...] = (chat_id, limit) if chat_id is not None else (limit,)
        rows = self.db.read(
            f"SELECT {RUN_COLUMNS} FROM reflector_runs {where} ORDER BY id DESC LIMIT %s",
            params,
        )
        return [run_row(row) for row in rows]

    def failed_attempts(self, chat_id: int, first_message_id: int) -> FailedAttempts:
        """Batch failures of runs starting at `first_message_id`, counted since the chat's
        newest done or skipped run; one query on the (chat_id, id) index."""
        row = self.db.read_one(
            "SELECT count(*), (array_agg(messages_seen ORDER BY id DESC))[1]"
            " FROM reflector_runs WHERE chat_id = %s AND batch_failed = 1"
            " AND first_message_id = %s AND id > coalesce((SELECT max(id) FROM reflector_runs"
            " WHERE chat_id = %s AND status IN ('done', 'skipped')), 0)",
            (chat_id, first_message_id, chat_id),
        )
        if row is None or not row[0]:
            return FailedAttempts()
        return FailedAttempts(int(row[0]), int(row[1]))

    def count(self, chat_id: int) -> int:
        row = self.db.read_one("SELECT count(*) FROM reflector_runs WHERE chat_id = %s", (chat_id,))
        return int(row[0]) if row else 0

    def forget_chat(self, chat_id: int) -> int:
        return self.db.write("DELETE FROM reflector_runs WHERE chat_id = %s", (chat_id,))
