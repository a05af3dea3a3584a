"""The live turn of each chat (`core.turn.live`): the request being sent, the reply as it
grows, the tool calls as they run, then the finished turn. One row per chat, overwritten by
its next turn, so the table never grows past the number of chats; the dashboard of another
process reads it."""

from __future__ import annotations

from typing import Any

_STATE = "CHECK (state IN ('running', 'done', 'failed'))"


def _table(ids: str, epoch: str, now: str) -> str:
    return f"""CREATE TABLE live_turns (
        chat_id {ids} PRIMARY KEY REFERENCES chats(id) ON DELETE CASCADE,
        inbound_id {ids} NOT NULL DEFAULT 0,  -- the message the turn answers (inbox id)
        owner TEXT NOT NULL DEFAULT '',  -- host:pid:random of the process taking the turn
        state TEXT NOT NULL DEFAULT 'running' {_STATE},
        request TEXT NOT NULL DEFAULT '{{}}',  -- JSON: the newest request, summarised
        reply TEXT NOT NULL DEFAULT '',  -- the reply so far (capped), then the final text
        tools TEXT NOT NULL DEFAULT '[]',  -- JSON: the turn's tool calls (capped)
        rounds INTEGER NOT NULL DEFAULT 0,  -- model calls so far
        started_at TEXT NOT NULL DEFAULT {now},
        updated_at {epoch} NOT NULL DEFAULT 0,  -- seconds since the epoch, the writer's clock
        finished_at TEXT
    )"""


def apply(conn: Any) -> None:
    conn.execute(_table("INTEGER", "REAL", "(strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"))


def apply_postgresql(conn: Any) -> None:
    conn.execute(_table("BIGINT", "DOUBLE PRECISION", "mnemo_now()"))
