"""ChatLease: a chat claimed by one reflector pass at a time, across threads and processes.

A lease is a row (chat, owner, expiry) claimed with a conditional upsert inside
BEGIN IMMEDIATE, so of two claimants exactly one wins; an expired lease (a crashed
process) can be taken over.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from core.db import Connection, transaction


def new_owner_id() -> str:
    """A token unique to one claim: host, process and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class Lease:
    chat_id: int
    owner: str
    expires_at: float


class ChatLease:
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

    def holds(self, lease: Lease) -> bool:
        """Whether `lease` is still this owner's (call inside the committing transaction)."""
        row = self.conn.execute(
            "SELECT 1 FROM reflector_leases WHERE chat_id = ? AND owner = ?",
            (lease.chat_id, lease.owner),
        ).fetchone()
        return row is not None

    def release(self, lease: Lease) -> None:
        self.conn.execute(
            "DELETE FROM reflector_leases WHERE chat_id = ? AND owner = ?",
            (lease.chat_id, lease.owner),
        )
