"""DatabaseDeliveryStore: the `DeliveryStore` on either engine (`inbox`, `outbox`,
`turn_leases`), one SQL text over `core.storage.database`.

Bot processes on many machines may share these rows. A chat's turn is claimed with one
`INSERT … ON CONFLICT (chat_id) DO UPDATE … WHERE <expired, mine or stale> RETURNING`:
the engine locks the lease row (SQLite the whole file), so of two claimants exactly one gets
a row back; an expired lease (its process died) can be taken over. On PostgreSQL a turn's
commit checks its lease `FOR SHARE`, which holds off a takeover until that commit is done
(the turn's messages, inbox state and reply go in together, or not at all).
"""

from __future__ import annotations

from core.api import Chat, Inbound, Outbound
from core.errors import LeaseLost
from core.storage.database import Database
from core.storage.store import DeliveryTotals, StoredInbound, StoredReply, TurnLease
from core.storage.store import inbound_from_row as _stored_inbound
from core.storage.store import reply_from_row as _stored_reply

_INBOX_COLUMNS = (
    "i.id, i.platform_message_id, i.sender_id, i.sender_name, i.text, i.respond,"
    " i.message_id, c.id, c.channel, c.external_chat_id, c.title, c.kind, i.sender_is_admin,"
    " i.sent_at"
)
_OUTBOX_COLUMNS = "o.id, c.channel, c.external_chat_id, o.text, o.reply_to, o.is_error, o.attempts"


class DatabaseDeliveryStore:
    """Inbound messages, replies and turn leases on a `Database` (sharing its transaction)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- inbound -----------------------------------------------------------------------

    def receive(self, chat: Chat, inbound: Inbound) -> StoredInbound | None:
        row = self.db.read_one(
            # ON CONFLICT, not a caught unique violation: that would abort a PostgreSQL
            # caller's transaction. The one unique key is (chat, platform message).
            "INSERT INTO inbox (chat_id, platform_message_id, sender_id, sender_name, text,"
            " respond, sender_is_admin, sent_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING RETURNING id",
            (chat.id, inbound.message_id or None, inbound.sender_id, inbound.sender_name,
             inbound.text, int(inbound.respond), int(inbound.sender_is_admin), inbound.sent_at),
        )  # fmt: skip
        if row is None:
            return None  # the chat already has this platform message: a replay
        return StoredInbound(int(row[0]), chat, inbound)

    def next_pending(self, chat_id: int, after_id: int = 0) -> StoredInbound | None:
        row = self.db.read_one(
            f"SELECT {_INBOX_COLUMNS} FROM inbox i JOIN chats c ON c.id = i.chat_id"
            " WHERE i.chat_id = ? AND i.state = 'pending' AND i.id > ? ORDER BY i.id LIMIT 1",
            (chat_id, after_id),
        )
        return _stored_inbound(row) if row else None

    def start_turn(self, inbound_id: int, message_id: int) -> None:
        self.db.write("UPDATE inbox SET message_id = ? WHERE id = ?", (message_id, inbound_id))

    def finish(self, inbound_id: int, reply: Outbound | None) -> StoredReply | None:
        state = "recorded" if reply is None else "answered"
        with self.db.transaction():
            handled = self.db.write(
                # The text stays only where the history does not have it (a command).
                "UPDATE inbox SET state = ?, handled_at = mnemo_now(),"
                " text = CASE WHEN message_id IS NULL THEN text ELSE '' END"
                " WHERE id = ? AND state = 'pending'",
                (state, inbound_id),
            )
            if handled != 1:
                raise LeaseLost(f"inbound message {inbound_id} is no longer pending")
            if reply is None:
                return None
            row = self.db.read_one(
                "INSERT INTO outbox (chat_id, inbox_id, text, reply_to, is_error)"
                " SELECT chat_id, id, ?, ?, ? FROM inbox WHERE id = ? RETURNING id",
                (reply.text, reply.reply_to, int(reply.is_error), inbound_id),
            )
        assert row is not None
        return StoredReply(int(row[0]), reply)

    # -- messages nobody asked for ------------------------------------------------------

    def post(self, chat_id: int, message: Outbound, origin: str) -> StoredReply | None:
        """Store a message that starts from Mnemo itself (a reminder): an outbox row with no
        inbox row, delivered like a reply. `origin` names what sent it (`task:12:…`); None
        when the chat already has a message of that origin (it was stored before)."""
        row = self.db.read_one(
            "INSERT INTO outbox (chat_id, text, reply_to, is_error, origin)"
            " VALUES (?, ?, '', ?, ?) ON CONFLICT DO NOTHING RETURNING id",
            (chat_id, message.text, int(message.is_error), origin),
        )
        return StoredReply(int(row[0]), message) if row else None

    # -- replies -----------------------------------------------------------------------

    def undelivered(self, chat_id: int, max_attempts: int) -> list[StoredReply]:
        rows = self.db.read(
            f"SELECT {_OUTBOX_COLUMNS} FROM outbox o JOIN chats c ON c.id = o.chat_id"
            " WHERE o.chat_id = ? AND o.delivered_at IS NULL AND o.attempts < ?"
            " ORDER BY o.id",
            (chat_id, max_attempts),
        )
        return [_stored_reply(row) for row in rows]

    def mark_delivered(self, reply_id: int) -> None:
        self.db.write(
            "UPDATE outbox SET delivered_at = mnemo_now(), attempts = attempts + 1, text = ''"
            " WHERE id = ?",
            (reply_id,),
        )

    def record_failed_attempt(self, reply_id: int, error: str) -> None:
        self.db.write(
            "UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?",
            (error[:500], reply_id),
        )

    def chats_awaiting(self, channels: list[str], max_attempts: int) -> list[int]:
        if not channels:
            return []
        in_channels, channel_params = self.db.dialect.in_values("c.channel", channels)
        rows = self.db.read(
            "SELECT waiting.chat_id FROM ("
            " SELECT chat_id, min(id) AS first FROM inbox WHERE state = 'pending'"
            " GROUP BY chat_id"
            " UNION ALL SELECT chat_id, min(id) FROM outbox"
            " WHERE delivered_at IS NULL AND attempts < ? GROUP BY chat_id"
            f") AS waiting JOIN chats c ON c.id = waiting.chat_id WHERE {in_channels}"
            " GROUP BY waiting.chat_id ORDER BY min(waiting.first)",
            (max_attempts, *channel_params),
        )
        return [int(row[0]) for row in rows]

    def delivery_totals(self, channel: str | None = None) -> DeliveryTotals:
        scope = (
            "JOIN chats c ON c.id = chat_id WHERE c.channel = coalesce(CAST(? AS TEXT), c.channel)"
        )
        row = self.db.read_one(  # both tables in one round trip
            "SELECT * FROM (SELECT count(*), count(*) FILTER (WHERE state = 'pending'),"
            " count(*) FILTER (WHERE state = 'answered'),"
            f" count(*) FILTER (WHERE state = 'recorded') FROM inbox {scope}) AS received,"
            " (SELECT count(*), count(delivered_at),"
            " coalesce(sum(attempts), 0) - count(delivered_at)"
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
            "INSERT INTO turn_leases AS lease (chat_id, owner, expires_at) VALUES (?, ?, ?)"
            " ON CONFLICT (chat_id) DO UPDATE SET owner = excluded.owner,"
            " expires_at = excluded.expires_at WHERE lease.expires_at <= ?"
            " OR lease.owner = excluded.owner OR lease.owner = ?"
            " RETURNING owner",
            (chat_id, owner, expires_at, now, stale_owner or None),
        )
        return row is not None

    def turn_holder(self, chat_id: int) -> TurnLease | None:
        row = self.db.read_one(
            "SELECT owner, expires_at FROM turn_leases WHERE chat_id = ?", (chat_id,)
        )
        return TurnLease(chat_id, row[0], float(row[1])) if row else None

    def renew_turn(self, lease: TurnLease, expires_at: float) -> bool:
        changed = self.db.write(
            "UPDATE turn_leases SET expires_at = ? WHERE chat_id = ? AND owner = ?",
            (expires_at, lease.chat_id, lease.owner),
        )
        return changed == 1

    def holds_turn(self, lease: TurnLease) -> bool:
        # FOR SHARE (PostgreSQL): inside the turn's transaction, a takeover waits until it
        # has committed. SQLite's writer lock already holds every other writer off.
        row = self.db.read_one(
            "SELECT 1 FROM turn_leases WHERE chat_id = ? AND owner = ?" + self.db.dialect.for_share,
            (lease.chat_id, lease.owner),
        )
        return row is not None

    def release_turn(self, lease: TurnLease) -> None:
        self.db.write(
            "DELETE FROM turn_leases WHERE chat_id = ? AND owner = ?",
            (lease.chat_id, lease.owner),
        )
