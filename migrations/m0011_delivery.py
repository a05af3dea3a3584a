"""Nothing lost between a platform and a reply: every inbound message is stored as it
arrives (`inbox`, unique per chat by the platform's message id, so a replayed update is
recognised), every reply records whether it went out (`outbox`), and a chat's turns take
a lease row (`turn_leases`) so that two processes never interleave them.

The `messages` table keeps its meaning (a chat's history in turn order): a user message
enters it when its turn starts, and the inbox row points to it from then on.
"""

from __future__ import annotations

from typing import Any

_NOW = "(strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"

STATEMENTS = [
    f"""CREATE TABLE inbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
        platform_message_id TEXT,  -- the platform's id of the message; NULL when it has none
        sender_id TEXT NOT NULL DEFAULT '',
        sender_name TEXT NOT NULL DEFAULT '',
        sender_is_admin INTEGER NOT NULL DEFAULT 0,  -- the platform says so (group admins)
        text TEXT NOT NULL DEFAULT '',  -- emptied once handled if `messages` has it
        respond INTEGER NOT NULL DEFAULT 1,  -- 0: store in the history, never answer
        -- pending: its turn has not finished; answered: its reply is in `outbox`;
        -- recorded: added to the history without a reply (it did not address the bot)
        state TEXT NOT NULL DEFAULT 'pending'
            CHECK (state IN ('pending', 'answered', 'recorded')),
        message_id INTEGER REFERENCES messages(id) ON DELETE SET NULL,
        received_at TEXT NOT NULL DEFAULT {_NOW},
        handled_at TEXT
    )""",
    "CREATE UNIQUE INDEX inbox_platform_message ON inbox (chat_id, platform_message_id)"
    " WHERE platform_message_id IS NOT NULL",
    "CREATE INDEX inbox_pending ON inbox (chat_id, id) WHERE state = 'pending'",
    f"""CREATE TABLE outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
        inbox_id INTEGER REFERENCES inbox(id) ON DELETE SET NULL,
        text TEXT NOT NULL DEFAULT '',  -- emptied once delivered
        reply_to TEXT NOT NULL DEFAULT '',
        is_error INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        created_at TEXT NOT NULL DEFAULT {_NOW},
        delivered_at TEXT
    )""",
    "CREATE INDEX outbox_undelivered ON outbox (chat_id, id) WHERE delivered_at IS NULL",
    """CREATE TABLE turn_leases (
        chat_id INTEGER PRIMARY KEY REFERENCES chats(id) ON DELETE CASCADE,
        owner TEXT NOT NULL,
        expires_at REAL NOT NULL
    )""",
]


def apply(conn: Any) -> None:
    for statement in STATEMENTS:
        conn.execute(statement)
