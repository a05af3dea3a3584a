"""DatabaseStrategyStore: the `StrategyStore` on either engine, one SQL text over
`core.storage.database`; every change is logged as an event, inside the caller's transaction when
one is open."""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from core.clock import iso_utc, utc_now
from core.storage.database import Database
from memory.strategies.lifecycle import (
    ARCHIVED,
    PROMOTED,
    Scores,
    days_between,
    decay_factor,
    settle,
)
from memory.strategies.store import TAGS, Clock, Strategy, StrategyEvent

_COLUMNS = (
    "id, chat_id, section, content, helpful, harmful, neutral, state, created_at,"
    " updated_at, last_used_at, evidence_at, state_changed_at"
)


class DatabaseStrategyStore:
    """Strategies and their events on a `Database`."""

    def __init__(self, db: Database, clock: Clock = utc_now) -> None:
        self.db = db
        self.clock = clock

    def transaction(self) -> AbstractContextManager[Any]:
        return self.db.transaction()

    def _strategy(self, row: Sequence[Any], now: datetime) -> Strategy:
        stored = Scores(float(row[4]), float(row[5]), float(row[6]))
        factor = decay_factor(days_between(row[11], now))
        return Strategy(
            row[0],
            row[1],
            row[2],
            row[3],
            stored,
            stored.scaled(factor),
            row[7],
            row[8],
            row[9],
            row[10],
            row[11],
            row[12],
        )

    def get(self, strategy_id: int) -> Strategy | None:
        row = self.db.read_one(f"SELECT {_COLUMNS} FROM strategies WHERE id = ?", (strategy_id,))
        return self._strategy(row, self.clock()) if row else None

    def for_chat(
        self,
        chat_id: int | None,
        *,
        include_global: bool = True,
        states: Sequence[str] | None = None,
    ) -> list[Strategy]:
        """Strategies of a chat (and global ones), best net score first."""
        where = (
            "(chat_id = ? OR (? AND chat_id IS NULL))" if chat_id is not None else "chat_id IS NULL"
        )
        params: list[Any] = [chat_id, bool(include_global)] if chat_id is not None else []
        if states:
            in_states, state_params = self.db.dialect.in_values("state", list(states))
            where += f" AND {in_states}"
            params.extend(state_params)
        rows = self.db.read(f"SELECT {_COLUMNS} FROM strategies WHERE {where} ORDER BY id", params)
        now = self.clock()
        found = [self._strategy(row, now) for row in rows]
        return sorted(found, key=lambda s: (-s.scores.net, s.id))

    def promoted(self, chat_id: int) -> list[Strategy]:
        # The chat's own only: learned strategies have no global scope (docs/context.md).
        return self.for_chat(chat_id, states=[PROMOTED], include_global=False)

    def add(
        self, chat_id: int | None, section: str, content: str, run_id: int | None = None
    ) -> int:
        stamp = iso_utc(self.clock())
        with self.db.transaction():
            row = self.db.read_one(
                "INSERT INTO strategies (chat_id, section, content, created_at, updated_at,"
                " last_used_at, evidence_at, state_changed_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (chat_id, section, content, stamp, stamp, stamp, stamp, stamp),
            )
            assert row is not None
            strategy_id = int(row[0])
            self._event(strategy_id, "ADD", {"section": section, "content": content}, run_id)
        return strategy_id

    def update(self, strategy_id: int, content: str, run_id: int | None = None) -> None:
        with self.db.transaction():
            self.db.write(
                "UPDATE strategies SET content = ?, updated_at = ? WHERE id = ?",
                (content, iso_utc(self.clock()), strategy_id),
            )
            self._event(strategy_id, "UPDATE", {"content": content}, run_id)

    def tag(self, strategy_id: int, tag: str, run_id: int | None = None) -> str:
        """Add one piece of evidence; return the state afterwards."""
        if tag not in TAGS:
            raise ValueError(f"unknown tag {tag!r}")
        current = self.get(strategy_id)
        if current is None:
            raise KeyError(strategy_id)
        scores = current.scores.plus(tag)
        stamp = iso_utc(self.clock())
        with self.db.transaction():
            self.db.write(
                "UPDATE strategies SET helpful = ?, harmful = ?, neutral = ?, evidence_at = ?,"
                " last_used_at = ?, updated_at = ? WHERE id = ?",
                (scores.helpful, scores.harmful, scores.neutral, stamp, stamp, stamp, strategy_id),
            )
            self._event(strategy_id, "TAG", {tag: 1}, run_id)
            return self._settle(strategy_id, run_id)

    def archive(self, strategy_id: int, run_id: int | None = None, reason: str = "removed") -> None:
        with self.db.transaction():
            self._set_state(strategy_id, ARCHIVED, run_id, reason)

    def mark_used(self, strategy_ids: Sequence[int]) -> None:
        """Record that these strategies reached a request (they are in use)."""
        if not strategy_ids:
            return
        in_ids, id_params = self.db.dialect.in_values("id", [int(i) for i in strategy_ids])
        self.db.write(
            f"UPDATE strategies SET last_used_at = ? WHERE {in_ids}",
            (iso_utc(self.clock()), *id_params),
        )

    def maintain(self, chat_id: int | None = None, run_id: int | None = None) -> int:
        """Apply due transitions (decay, cool-down, archiving); return how many changed."""
        where = "state != 'ARCHIVED'" + (" AND chat_id = ?" if chat_id is not None else "")
        params = (chat_id,) if chat_id is not None else ()
        ids = [row[0] for row in self.db.read(f"SELECT id FROM strategies WHERE {where}", params)]
        changed = 0
        with self.db.transaction():
            for strategy_id in ids:
                before = self.get(strategy_id)
                changed += before is not None and self._settle(strategy_id, run_id) != before.state
        return changed

    def events(self, strategy_id: int) -> list[StrategyEvent]:
        rows = self.db.read(
            "SELECT kind, delta, run_id, at FROM strategy_events WHERE strategy_id = ? ORDER BY id",
            (strategy_id,),
        )
        return [
            StrategyEvent(kind, json.loads(delta), run_id, at) for kind, delta, run_id, at in rows
        ]

    def cite(self, strategy_ids: Sequence[int], chat_id: int, message_id: int) -> None:
        with self.db.transaction():
            for strategy_id in sorted(set(strategy_ids)):
                delta = {"chat_id": chat_id, "message_id": message_id}
                self._event(strategy_id, "CITED", delta, None)

    def pending_citations(self, chat_id: int) -> set[int]:
        rows = self.db.read(
            "SELECT e.strategy_id, e.kind, e.delta FROM strategy_events e"
            " JOIN strategies s ON s.id = e.strategy_id"
            " WHERE s.chat_id = ? AND e.kind IN ('CITED', 'JUDGED')"
            " ORDER BY e.id",
            (chat_id,),
        )
        pending: set[int] = set()
        for strategy_id, kind, delta in rows:
            if json.loads(delta).get("chat_id") != chat_id:
                continue
            if kind == "CITED":
                pending.add(int(strategy_id))
            else:
                pending.discard(int(strategy_id))
        return pending

    def judged(self, strategy_ids: Sequence[int], chat_id: int, run_id: int | None) -> None:
        with self.db.transaction():
            for strategy_id in sorted(set(strategy_ids)):
                self._event(strategy_id, "JUDGED", {"chat_id": chat_id}, run_id)

    def recent_tags(self, strategy_id: int, limit: int = 3) -> list[str]:
        rows = self.db.read(
            "SELECT delta FROM strategy_events WHERE strategy_id = ? AND kind = 'TAG'"
            " ORDER BY id DESC LIMIT ?",
            (strategy_id, limit),
        )
        return [next(iter(json.loads(row[0])), "neutral") for row in reversed(rows)]

    def forget_chat(self, chat_id: int) -> int:
        with self.db.transaction():
            self.db.write(
                "DELETE FROM strategy_events WHERE strategy_id IN"
                " (SELECT id FROM strategies WHERE chat_id = ?)",
                (chat_id,),
            )
            return self.db.write("DELETE FROM strategies WHERE chat_id = ?", (chat_id,))

    def _settle(self, strategy_id: int, run_id: int | None) -> str:
        current = self.get(strategy_id)
        assert current is not None
        now = self.clock()
        state = settle(
            current.state,
            current.scores,
            days_unused=days_between(current.last_used_at, now),
            days_in_state=days_between(current.state_changed_at, now),
        )
        if state != current.state:
            self._set_state(strategy_id, state, run_id, "lifecycle")
        return state

    def _set_state(self, strategy_id: int, state: str, run_id: int | None, reason: str) -> None:
        stamp = iso_utc(self.clock())
        self.db.write(
            "UPDATE strategies SET state = ?, state_changed_at = ?, updated_at = ? WHERE id = ?",
            (state, stamp, stamp, strategy_id),
        )
        self._event(strategy_id, "STATE", {"state": state, "reason": reason}, run_id)

    def _event(
        self, strategy_id: int, kind: str, delta: dict[str, Any], run_id: int | None
    ) -> None:
        self.db.write(
            "INSERT INTO strategy_events (strategy_id, kind, delta, run_id, at)"
            " VALUES (?, ?, ?, ?, ?)",
            (
                strategy_id,
                kind,
                json.dumps(delta, ensure_ascii=False),
                run_id,
                iso_utc(self.clock()),
            ),
        )
