"""SqliteDeliveryStore: the `DeliveryStore` on SQLite (`inbox`, `outbox`, `turn_leases`).

A lease is claimed inside BEGIN IMMEDIATE, so of two claimants exactly one wins; an
expired lease (its process died) can be taken over.
"""

from __future__ import annotations

from core.api import Chat, Inbound, Outbound
from core.db import Connection, IntegrityError, transaction
from core.errors import LeaseLost
from core.store import DeliveryTotals, StoredInbound, StoredReply, TurnLease
from core.store import inbound_from_row as _stored_inbound
from core.store import reply_from_row as _stored_reply

_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
_INBOX_COLUMNS = (
    "i.id, i.platform_message_id, i.sender_id, i.sender_name, i.text, i.respond,"
    " i.message_id, c.id, c.channel, c.external_chat_id, c.title, c.kind, i.sender_is_admin"
)
_OUTBOX_COLUMNS = "o.id, c.channel, c.external_chat_id, o.text, o.reply_to, o.is_error, o.attempts"


class SqliteDeliveryStore:
    """Inbound messages, replies and turn leases on one connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    # -- inbound -----------------------------------------------------------------------

    def receive(self, chat: Chat, inbound: Inbound) -> StoredInbound | None:
        try:
            with transaction(self.conn):
                cursor = self.conn.execute(
                    "INSERT INTO inbox (chat_id, platform_message_id, sender_id, sender_name,"
                    " text, respond, sender_is_admin) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (chat.id, inbound.message_id or None, inbound.sender_id,
                     inbound.sender_name, inbound.text, int(inbound.respond),
                     int(inbound.sender_is_admin)),
                )  # fmt: skip
        except IntegrityError as exc:
            if "UNIQUE" not in str(exc):
                raise
            return None  # the chat already has this platform message: a replay
        return StoredInbound(int(cursor.lastrowid), chat, inbound)

    def next_pending(self, chat_id: int, after_id: int = 0) -> StoredInbound | None:
        row = self.conn.execute(
            f"SELECT {_INBOX_COLUMNS} FROM inbox i JOIN chats c ON c.id = i.chat_id"
            " WHERE i.chat_id = ? AND i.state = 'pending' AND i.id > ? ORDER BY i.id LIMIT 1",
            (chat_id, after_id),
        ).fetchone()
        return _stored_inbound(row) if row else None

    def start_turn(self, inbound_id: int, message_id: int) -> None:
        with transaction(self.conn):
            self.conn.execute(
                "UPDATE inbox SET message_id = ? WHERE id = ?", (message_id, inbound_id)
            )

    def finish(self, inbound_id: int, reply: Outbound | None) -> StoredReply | None:
        state = "recorded" if reply is None else "answered"
        with transaction(self.conn):
            cursor = self.conn.execute(
                # The text stays only where the history does not have it (a command).
                "UPDATE inbox SET state = ?, handled_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),"
                " text = CASE WHEN message_id IS NULL THEN text ELSE '' END"
                " WHERE id = ? AND state = 'pending'",
                (state, inbound_id),
            )
            if cursor.rowcount != 1:
                raise LeaseLost(f"inbound message {inbound_id} is no longer pending")
            if reply is None:
                return None
            cursor = self.conn.execute(
                "INSERT INTO outbox (chat_id, inbox_id, text, reply_to, is_error)"
                " SELECT chat_id, id, ?, ?, ? FROM inbox WHERE id = ?",
                (reply.text, reply.reply_to, int(reply.is_error), inbound_id),
            )
        return StoredReply(int(cursor.lastrowid), reply)

    # -- replies -----------------------------------------------------------------------

    def undelivered(self, chat_id: int, max_attempts: int) -> list[StoredReply]:
        rows = self.conn.execute(
            f"SELECT {_OUTBOX_COLUMNS} FROM outbox o JOIN chats c ON c.id = o.chat_id"
            " WHERE o.chat_id = ? AND o.delivered_at IS NULL AND o.attempts < ? ORDER BY o.id",
            (chat_id, max_attempts),
        ).fetchall()
        return [_stored_reply(row) for row in rows]

    def mark_delivered(self, reply_id: int) -> None:
        with transaction(self.conn):
            self.conn.execute(
                f"UPDATE outbox SET delivered_at = {_NOW}, attempts = attempts + 1, text = ''"
                " WHERE id = ?",
                (reply_id,),
            )

    def record_failed_attempt(self, reply_id: int, error: str) -> None:
        with transaction(self.conn):
            self.conn.execute(
                "UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?",
                (error[:500], reply_id),
            )

    def chats_awaiting(self, channels: list[str], max_attempts: int) -> list[int]:
        if not channels:
            return []
        marks = ", ".join("?" for _ in channels)
        rows = self.conn.execute(
            "SELECT chat_id FROM ("
            " SELECT chat_id, min(id) AS first FROM inbox WHERE state = 'pending'"
            " GROUP BY chat_id"
            " UNION ALL SELECT chat_id, min(id) FROM outbox"
            " WHERE delivered_at IS NULL AND attempts < ? GROUP BY chat_id"
            f") JOIN chats c ON c.id = chat_id WHERE c.channel IN ({marks})"
            " GROUP BY chat_id ORDER BY min(first)",
            (max_attempts, *channels),
        ).fetchall()
        return [int(row[0]) for row in rows]

    def delivery_totals(self, channel: str | None = None) -> DeliveryTotals:
        scope = "JOIN chats c ON c.id = chat_id WHERE (? IS NULL OR c.channel = ?)"
        inbox = self.conn.execute(
            "SELECT count(*), coalesce(sum(state = 'pending'), 0),"
            " coalesce(sum(state = 'answered'), 0), coalesce(sum(state = 'recorded'), 0)"
            f" FROM inbox {scope}",
            (channel, channel),
        ).fetchone()
        outbox = self.conn.execute(
            "SELECT count(*), coalesce(sum(delivered_at IS NOT NULL), 0),"
            " coalesce(sum(attempts - (delivered_at IS NOT NULL)), 0)"
            f" FROM outbox {scope}",
            (channel, channel),
        ).fetchone()
        return DeliveryTotals(*(int(value) for value in (*inbox, *outbox)))

    # -- turn leases -------------------------------------------------------------------

    def claim_turn(
        self, chat_id: int, owner: str, expires_at: float, now: float, stale_owner: str = ""
    ) -> bool:
        with transaction(self.conn):
            self.conn.execute(
                "INSERT INTO turn_leases (chat_id, owner, expires_at) VALUES (?, ?, ?)"
                " ON CONFLICT (chat_id) DO UPDATE SET owner = excluded.owner,"
                " expires_at = excluded.expires_at WHERE turn_leases.expires_at <= ?"
                " OR turn_leases.owner = excluded.owner OR turn_leases.owner = ?",
                (chat_id, owner, expires_at, now, stale_owner or None),
            )
            row = self.conn.execute(
                "SELECT owner FROM turn_leases WHERE chat_id = ?", (chat_id,)
            ).fetchone()
        return row is not None and row[0] == owner

    def turn_holder(self, chat_id: int) -> TurnLease | None:
        row = self.conn.execute(
            "SELECT owner, expires_at FROM turn_leases WHERE chat_id = ?", (chat_id,)
        ).fetchone()
        return TurnLease(chat_id, row[0], float(row[1])) if row else None

    def renew_turn(self, lease: TurnLease, expires_at: float) -> bool:
        with transaction(self.conn):
            cursor = self.conn.execute(
                "UPDATE turn_leases SET expires_at = ? WHERE chat_id = ? AND owner = ?",
                (expires_at, lease.chat_id, lease.owner),
            )
        return bool(cursor.rowcount == 1)

    def holds_turn(self, lease: TurnLease) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM turn_leases WHERE chat_id = ? AND owner = ?",
            (lease.chat_id, lease.owner),
        ).fetchone()
        return row is not None

    def release_turn(self, lease: TurnLease) -> None:
        with transaction(self.conn):
            self.conn.execute(
                "DELETE FROM turn_leases WHERE chat_id = ? AND owner = ?",
                (lease.chat_id, lease.owner),
            )
