"""PgDeliveryStore: the `DeliveryStore` on PostgreSQL (`inbox`, `outbox`, `turn_leases`).

Bot processes on many machines share these rows. A chat's turn is claimed with one
`INSERT … ON CONFLICT (chat_id) DO UPDATE … WHERE <expired, mine or stale> RETURNING`:
PostgreSQL locks the lease row, so of two claimants exactly one gets a row back. A turn's
commit checks its lease with `FOR SHARE`, which holds off a takeover until that commit is
done (the turn's messages, inbox state and reply go in together, or not at all).
"""

from __future__ import annotations

from core.api import Chat, Inbound, Outbound
from core.errors import LeaseLost
from core.pg_db import PgDatabase
from core.store import DeliveryTotals, StoredInbound, StoredReply, TurnLease
from core.store import inbound_from_row as _stored_inbound
from core.store import reply_from_row as _stored_reply

_INBOX_COLUMNS = (
    "i.id, i.platform_message_id, i.sender_id, i.sender_name, i.text, i.respond,"
    " i.message_id, c.id, c.channel, c.external_chat_id, c.title, c.kind, i.sender_is_admin"
)
_OUTBOX_COLUMNS = "o.id, c.channel, c.external_chat_id, o.text, o.reply_to, o.is_error, o.attempts"
# The text stays only where the history does not have it (a command).
_HANDLED = (
    "UPDATE inbox SET state = %s, handled_at = mnemo_now(),"
    " text = CASE WHEN message_id IS NULL THEN text ELSE '' END"
    " WHERE id = %s AND state = 'pending'"
)


class PgDeliveryStore:
    """Inbound messages, replies and turn leases on a `PgDatabase` (sharing its transaction)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    # -- inbound -----------------------------------------------------------------------

    def receive(self, chat: Chat, inbound: Inbound) -> StoredInbound | None:
        row = self.db.read_one(
            # ON CONFLICT, not a caught UniqueViolation: that would abort the caller's transaction.
            "INSERT INTO inbox (chat_id, platform_message_id, sender_id, sender_name, text,"
            " respond, sender_is_admin) VALUES (%s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (chat_id, platform_message_id) WHERE platform_message_id IS NOT NULL"
            " DO NOTHING RETURNING id",
            (chat.id, inbound.message_id or None, inbound.sender_id, inbound.sender_name,
             inbound.text, int(inbound.respond), int(inbound.sender_is_admin)),
        )  # fmt: skip
        if row is None:
            return None  # the chat already has this platform message: a replay
        return StoredInbound(int(row[0]), chat, inbound)

    def next_pending(self, chat_id: int, after_id: int = 0) -> StoredInbound | None:
        row = self.db.read_one(
            f"SELECT {_INBOX_COLUMNS} FROM inbox i JOIN chats c ON c.id = i.chat_id"
            " WHERE i.chat_id = %s AND i.state = 'pending' AND i.id > %s ORDER BY i.id LIMIT 1",
            (chat_id, after_id),
        )
        return _stored_inbound(row) if row else None

    def start_turn(self, inbound_id: int, message_id: int) -> None:
        self.db.write("UPDATE inbox SET message_id = %s WHERE id = %s", (message_id, inbound_id))

    def finish(self, inbound_id: int, reply: Outbound | None) -> StoredReply | None:
        if reply is None:
            if self.db.write(_HANDLED, ("recorded", inbound_id)) != 1:
                raise LeaseLost(f"inbound message {inbound_id} is no longer pending")
            return None
        row = self.db.read_one(  # mark it answered and record the reply: one statement
            f"WITH handled AS ({_HANDLED} RETURNING chat_id, id)"
            " INSERT INTO outbox (chat_id, inbox_id, text, reply_to, is_error)"
            " SELECT chat_id, id, %s, %s, %s FROM handled RETURNING id",
            ("answered", inbound_id, reply.text, reply.reply_to, int(reply.is_error)),
        )
        if row is None:
            raise LeaseLost(f"inbound message {inbound_id} is no longer pending")
        return StoredReply(int(row[0]), reply)

    # -- replies -----------------------------------------------------------------------

    def undelivered(self, chat_id: int, max_attempts: int) -> list[StoredReply]:
        rows = self.db.read(
            f"SELECT {_OUTBOX_COLUMNS} FROM outbox o JOIN chats c ON c.id = o.chat_id"
            " WHERE o.chat_id = %s AND o.delivered_at IS NULL AND o.attempts < %s"
            " ORDER BY o.id",
            (chat_id, max_attempts),
        )
        return [_stored_reply(row) for row in rows]

    def mark_delivered(self, reply_id: int) -> None:
        self.db.write(
            "UPDATE outbox SET delivered_at = mnemo_now(), attempts = attempts + 1, text = ''"
            " WHERE id = %s",
            (reply_id,),
        )

    def record_failed_attempt(self, reply_id: int, error: str) -> None:
        self.db.write(
            "UPDATE outbox SET attempts = attempts + 1, last_error = %s WHERE id = %s",
            (error[:500], reply_id),
        )

    def chats_awaiting(self, channels: list[str], max_attempts: int) -> list[int]:
        if not channels:
            return []
        rows = self.db.read(
            "SELECT waiting.chat_id FROM ("
            " SELECT chat_id, min(id) AS first FROM inbox WHERE state = 'pending'"
            " GROUP BY chat_id"
            " UNION ALL SELECT chat_id, min(id) FROM outbox"
            " WHERE delivered_at IS NULL AND attempts < %s GROUP BY chat_id"
            ") AS waiting JOIN chats c ON c.id = waiting.chat_id WHERE c.channel = ANY(%s)"
            " GROUP BY waiting.chat_id ORDER BY min(waiting.first)",
            (max_attempts, list(channels)),
        )
        return [int(row[0]) for row in rows]

    def delivery_totals(self, channel: str | None = None) -> DeliveryTotals:
        scope = "JOIN chats c ON c.id = chat_id WHERE c.channel = coalesce(%s::text, c.channel)"
        row = self.db.read_one(  # both tables in one round trip
            "SELECT * FROM (SELECT count(*), count(*) FILTER (WHERE state = 'pending'),"
            " count(*) FILTER (WHERE state = 'answered'),"
            f" count(*) FILTER (WHERE state = 'recorded') FROM inbox {scope}) AS received,"
            " (SELECT count(*), count(delivered_at),"
            " coalesce(sum(attempts - (delivered_at IS NOT NULL)::int), 0)"
            f" FROM outbox {scope}) AS replied",
            (channel, channel),
        )
        assert row is not None
        return DeliveryTotals(*(int(value) for value in row))

    # -- turn leases -------------------------------------------------------------------

    def claim_turn(
        self, chat_id: int, owner: str, expires_at: float, now: float, stale_owner: str = ""
    ) -> bool:
        row = self.db.read_one(
            "INSERT INTO turn_leases AS lease (chat_id, owner, expires_at) VALUES (%s, %s, %s)"
            " ON CONFLICT (chat_id) DO UPDATE SET owner = excluded.owner,"
            " expires_at = excluded.expires_at WHERE lease.expires_at <= %s"
            " OR lease.owner = excluded.owner OR lease.owner = %s"
            " RETURNING owner",
            (chat_id, owner, expires_at, now, stale_owner or None),
        )
        return row is not None

    def turn_holder(self, chat_id: int) -> TurnLease | None:
        row = self.db.read_one(
            "SELECT owner, expires_at FROM turn_leases WHERE chat_id = %s", (chat_id,)
        )
        return TurnLease(chat_id, row[0], float(row[1])) if row else None

    def renew_turn(self, lease: TurnLease, expires_at: float) -> bool:
        changed = self.db.write(
            "UPDATE turn_leases SET expires_at = %s WHERE chat_id = %s AND owner = %s",
            (expires_at, lease.chat_id, lease.owner),
        )
        return changed == 1

    def holds_turn(self, lease: TurnLease) -> bool:
        # FOR SHARE: inside the turn's transaction, a takeover waits until it has committed.
        row = self.db.read_one(
            "SELECT 1 FROM turn_leases WHERE chat_id = %s AND owner = %s FOR SHARE",
            (lease.chat_id, lease.owner),
        )
        return row is not None

    def release_turn(self, lease: TurnLease) -> None:
        self.db.write(
            "DELETE FROM turn_leases WHERE chat_id = %s AND owner = %s",
            (lease.chat_id, lease.owner),
        )
