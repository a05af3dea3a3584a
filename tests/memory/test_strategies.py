"""Strategy lifecycle transitions and decay arithmetic, pure and through the store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from core.db import connect
from core.sqlite_store import SqliteSessionStore
from memory.strategies.lifecycle import (
    ARCHIVED,
    DEMOTED,
    PROMOTED,
    SHADOW,
    Scores,
    decay_factor,
    next_state,
    settle,
)
from memory.strategies.sqlite_store import SqliteStrategyStore


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, days: float) -> None:
        self.now += timedelta(days=days)


def test_decay_is_flat_in_the_grace_period_then_halves_every_30_days() -> None:
    assert decay_factor(0) == decay_factor(7) == 1.0
    assert decay_factor(37) == pytest.approx(0.5)
    assert decay_factor(67) == pytest.approx(0.25)
    assert decay_factor(22) == pytest.approx(0.5**0.5)


@pytest.mark.parametrize(
    ("state", "scores", "unused", "in_state", "expected"),
    [
        (SHADOW, Scores(2, 0), 0, 0, PROMOTED),
        (SHADOW, Scores(1, 0), 0, 0, SHADOW),
        (SHADOW, Scores(2, 2), 0, 0, SHADOW),
        (PROMOTED, Scores(3, 3), 0, 0, DEMOTED),
        (PROMOTED, Scores(3, 2), 0, 0, PROMOTED),
        (DEMOTED, Scores(1, 2), 0, 13, DEMOTED),
        (DEMOTED, Scores(1, 2), 0, 14, SHADOW),
        (PROMOTED, Scores(5, 0), 90, 0, ARCHIVED),
        (SHADOW, Scores(0, 0), 89, 0, SHADOW),
        (ARCHIVED, Scores(9, 0), 0, 0, ARCHIVED),
    ],
)
def test_next_state(
    state: str, scores: Scores, unused: float, in_state: float, expected: str
) -> None:
    assert next_state(state, scores, days_unused=unused, days_in_state=in_state) == expected


def test_settle_runs_transitions_to_a_fixed_point() -> None:
    assert settle(DEMOTED, Scores(1, 2), days_unused=0, days_in_state=20) == SHADOW
    assert settle(SHADOW, Scores(4, 1), days_unused=0, days_in_state=0) == PROMOTED


@pytest.fixture
def store_and_chat(tmp_path: Path) -> tuple[SqliteStrategyStore, int, Clock]:
    conn = connect(tmp_path / "m.db")
    chat = SqliteSessionStore(conn).get_or_create_chat("terminal", "a")
    clock = Clock()
    return SqliteStrategyStore(conn, clock), chat.id, clock


def test_store_promotes_demotes_and_logs_every_change(
    store_and_chat: tuple[SqliteStrategyStore, int, Clock],
) -> None:
    store, chat_id, clock = store_and_chat
    sid = store.add(chat_id, "language", "Answers in Spanish land better with this user")
    assert store.tag(sid, "helpful") == SHADOW
    assert store.tag(sid, "helpful") == PROMOTED
    assert [s.id for s in store.promoted(chat_id)] == [sid]
    store.tag(sid, "harmful")
    assert store.tag(sid, "harmful") == DEMOTED
    assert store.promoted(chat_id) == []
    clock.advance(14)
    assert store.maintain(chat_id) == 1
    strategy = store.get(sid)
    assert strategy is not None and strategy.state == SHADOW
    kinds = [kind for kind, *_ in store.events(sid)]
    assert kinds == ["ADD", "TAG", "TAG", "STATE", "TAG", "TAG", "STATE", "STATE"]


def test_scores_decay_and_unused_strategies_are_archived(
    store_and_chat: tuple[SqliteStrategyStore, int, Clock],
) -> None:
    store, chat_id, clock = store_and_chat
    sid = store.add(chat_id, "format", "Short bullet lists work better than prose here")
    store.tag(sid, "helpful")
    store.tag(sid, "helpful")
    clock.advance(37)
    strategy = store.get(sid)
    assert strategy is not None
    assert strategy.scores.helpful == pytest.approx(1.0)
    assert strategy.stored.helpful == 2.0
    store.tag(sid, "helpful")  # decayed 1.0 + 1
    again = store.get(sid)
    assert again is not None and again.stored.helpful == pytest.approx(2.0)
    clock.advance(90)
    store.maintain()
    archived = store.get(sid)
    assert archived is not None and archived.state == ARCHIVED
