"""Learned strategies (an ACE-style playbook) and the log of every change to them."""

from __future__ import annotations

from typing import Any

_NOW = "(strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"

STATEMENTS = [
    f"""CREATE TABLE strategies (
        id INTEGER PRIMARY KEY,
        chat_id INTEGER REFERENCES chats(id) ON DELETE CASCADE,
        section TEXT NOT NULL DEFAULT 'general',
        content TEXT NOT NULL,
        helpful REAL NOT NULL DEFAULT 0,
        harmful REAL NOT NULL DEFAULT 0,
        neutral REAL NOT NULL DEFAULT 0,
        state TEXT NOT NULL DEFAULT 'SHADOW'
            CHECK (state IN ('SHADOW', 'PROMOTED', 'DEMOTED', 'ARCHIVED')),
        created_at TEXT NOT NULL DEFAULT {_NOW},
        updated_at TEXT NOT NULL DEFAULT {_NOW},
        last_used_at TEXT NOT NULL DEFAULT {_NOW},
        evidence_at TEXT NOT NULL DEFAULT {_NOW},
        state_changed_at TEXT NOT NULL DEFAULT {_NOW}
    )""",
    "CREATE INDEX strategies_chat_state ON strategies (chat_id, state)",
    f"""CREATE TABLE strategy_events (
        id INTEGER PRIMARY KEY,
        strategy_id INTEGER NOT NULL REFERENCES strategies(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        delta TEXT NOT NULL DEFAULT '{{}}',
        run_id INTEGER,
        at TEXT NOT NULL DEFAULT {_NOW}
    )""",
    "CREATE INDEX strategy_events_strategy ON strategy_events (strategy_id, id)",
]


def apply(conn: Any) -> None:
    for statement in STATEMENTS:
        conn.execute(statement)
