"""`live_turns` on either engine, one SQL text over `core.storage.database`: each chat's
turn in progress (or its last one), one row per chat, overwritten by the next turn.

Writes are keyed by (chat, owner, inbound message): a process that lost a chat's turn to
another never overwrites the newer turn's row. Every method runs inside the caller's
transaction when one is open, else on its own (a live write is one short statement)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from core.storage.database import Database

COLUMNS = "chat_id, inbound_id, owner, state, request, reply, tools, rounds, started_at," \
    " updated_at, finished_at"  # fmt: skip
_MINE = "chat_id = ? AND owner = ? AND inbound_id = ?"


@dataclass(frozen=True)
class LiveTurnKey:
    """Which turn a live row belongs to: a chat, the process taking it, the message."""

    chat_id: int
    owner: str
    inbound_id: int


@dataclass(frozen=True)
class LiveTurnRow:
    """One chat's live row as stored."""

    chat_id: int
    inbound_id: int
    owner: str
    state: str  # running, done, failed
    request: dict[str, Any]
    reply: str
    tools: list[dict[str, Any]]
    rounds: int
    started_at: str
    updated_at: float
    finished_at: str | None


class DatabaseLiveTurnStore:
    """Starts, updates, finishes and reads the chats' live turns."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def begin(self, key: LiveTurnKey, now: float) -> None:
        """The chat's row, overwritten: a new turn, running, with nothing in it yet."""
        self.db.write(
            f"INSERT INTO live_turns ({COLUMNS}) VALUES"
            " (?, ?, ?, 'running', '{}', '', '[]', 0, mnemo_now(), ?, NULL)"
            " ON CONFLICT (chat_id) DO UPDATE SET inbound_id = excluded.inbound_id,"
            " owner = excluded.owner, state = 'running', request = '{}', reply = '',"
            " tools = '[]', rounds = 0, started_at = excluded.started_at,"
            " updated_at = excluded.updated_at, finished_at = NULL",
            (key.chat_id, key.inbound_id, key.owner, now),
        )

    def set_request(self, key: LiveTurnKey, request: dict[str, Any], now: float) -> bool:
        """A new model call: its request, and the reply shown so far starts again."""
        return self._update(
            "request = ?, reply = '', rounds = rounds + 1", (json.dumps(request),), key, now
        )

    def set_reply(self, key: LiveTurnKey, reply: str, now: float) -> bool:
        return self._update("reply = ?", (reply,), key, now)

    def set_tools(self, key: LiveTurnKey, tools: list[dict[str, Any]], now: float) -> bool:
        return self._update("tools = ?", (json.dumps(tools),), key, now)

    def finish(self, key: LiveTurnKey, state: str, reply: str, now: float) -> bool:
        """The turn is over (`done` or `failed`), with the text the user got."""
        return self._update(
            "state = ?, reply = ?, finished_at = mnemo_now()", (state, reply), key, now
        )

    def get(self, chat_id: int) -> LiveTurnRow | None:
        row = self.db.read_one(f"SELECT {COLUMNS} FROM live_turns WHERE chat_id = ?", (chat_id,))
        if row is None:
            return None
        return LiveTurnRow(
            chat_id=int(row[0]),
            inbound_id=int(row[1]),
            owner=str(row[2]),
            state=str(row[3]),
            request=json.loads(row[4]),
            reply=str(row[5]),
            tools=json.loads(row[6]),
            rounds=int(row[7]),
            started_at=str(row[8]),
            updated_at=float(row[9]),
            finished_at=None if row[10] is None else str(row[10]),
        )

    def _update(self, assignments: str, values: tuple[Any, ...], key: LiveTurnKey,
                now: float) -> bool:  # fmt: skip
        """Change this turn's row (only while it is still this turn's); False otherwise."""
        changed = self.db.write(
            f"UPDATE live_turns SET {assignments}, updated_at = ? WHERE {_MINE}",
            (*values, now, key.chat_id, key.owner, key.inbound_id),
        )
        return changed > 0
