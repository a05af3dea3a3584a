"""Strategy lifecycle transitions and decay arithmetic, pure and through the store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory.stores import strategy_store
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
from memory.strategies.store import StrategyStore
from tests.memory.conftest import Engine


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
def store_and_chat(engine: Engine) -> tuple[StrategyStore, int, Clock]:
    """A strategy store of each engine (`engine`), a chat and the clock it reads."""
    clock = Clock()
    return strategy_store(engine.storage, clock), engine.chat("a"), clock


def test_store_promotes_demotes_and_logs_every_change(
    store_and_chat: tuple[StrategyStore, int, Clock],
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
    store_and_chat: tuple[StrategyStore, int, Clock],
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


def test_for_chat_mark_used_and_forget_chat(
    store_and_chat: tuple[StrategyStore, int, Clock], engine: Engine
) -> None:
    store, chat_id, clock = store_and_chat
    other = engine.chat("b")
    mine = store.add(chat_id, "tone", "Keep it short")
    shared = store.add(None, "tone", "Say when unsure")
    theirs = store.add(other, "tone", "Use emoji")
    store.tag(mine, "helpful")
    assert [s.id for s in store.for_chat(chat_id)] == [mine, shared]  # best net score first
    assert [s.id for s in store.for_chat(chat_id, include_global=False)] == [mine]
    assert [s.id for s in store.for_chat(None)] == [shared]
    assert store.for_chat(chat_id, states=[PROMOTED]) == []
    clock.advance(3)
    store.mark_used([mine, shared])
    used = store.get(mine)
    assert used is not None and used.last_used_at > used.created_at
    assert store.forget_chat(chat_id) == 1
    assert store.get(mine) is None and store.events(mine) == []
    assert store.get(shared) is not None and store.get(theirs) is not None
