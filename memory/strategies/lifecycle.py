"""The strategy lifecycle and score decay, as pure functions.

    SHADOW ──(helpful ≥ 2 and helpful > harmful)──▶ PROMOTED ──(harmful ≥ helpful)──▶ DEMOTED
      ▲                                                                                  │
      └──────────────────────────(cooled down for COOLDOWN_DAYS)─────────────────────────┘
    any state ──(unused for ARCHIVE_AFTER_DAYS, or REMOVE)──▶ ARCHIVED

Only PROMOTED strategies are injected. Scores decay with a 30-day half-life once the
newest evidence is older than a 7-day grace period.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

SHADOW, PROMOTED, DEMOTED, ARCHIVED = "SHADOW", "PROMOTED", "DEMOTED", "ARCHIVED"
STATES = (SHADOW, PROMOTED, DEMOTED, ARCHIVED)

HALF_LIFE_DAYS = 30.0
GRACE_DAYS = 7.0
ARCHIVE_AFTER_DAYS = 90.0
COOLDOWN_DAYS = 14.0
PROMOTE_MIN_HELPFUL = 2.0


@dataclass(frozen=True)
class Scores:
    helpful: float = 0.0
    harmful: float = 0.0
    neutral: float = 0.0

    @property
    def net(self) -> float:
        return self.helpful - self.harmful

    def scaled(self, factor: float) -> Scores:
        return Scores(self.helpful * factor, self.harmful * factor, self.neutral * factor)

    def plus(self, tag: str) -> Scores:
        return Scores(
            self.helpful + (tag == "helpful"),
            self.harmful + (tag == "harmful"),
            self.neutral + (tag == "neutral"),
        )


def decay_factor(age_days: float) -> float:
    """1.0 within the grace period, then halving every HALF_LIFE_DAYS."""
    if age_days <= GRACE_DAYS:
        return 1.0
    return float(0.5 ** ((age_days - GRACE_DAYS) / HALF_LIFE_DAYS))


def days_between(earlier: str, later: datetime) -> float:
    """Days from an ISO 8601 UTC timestamp to `later` (never negative)."""
    start = datetime.fromisoformat(earlier.replace("Z", "+00:00"))
    return max(0.0, (later - start).total_seconds() / 86_400)


def next_state(state: str, scores: Scores, *, days_unused: float, days_in_state: float) -> str:
    """One lifecycle step; apply until it stops changing (see `settle`)."""
    if state == ARCHIVED:
        return ARCHIVED
    if days_unused >= ARCHIVE_AFTER_DAYS:
        return ARCHIVED
    if (
        state == SHADOW
        and scores.helpful >= PROMOTE_MIN_HELPFUL
        and scores.helpful > scores.harmful
    ):
        return PROMOTED
    if state == PROMOTED and scores.harmful >= scores.helpful:
        return DEMOTED
    if state == DEMOTED and days_in_state >= COOLDOWN_DAYS:
        return SHADOW
    return state


def settle(state: str, scores: Scores, *, days_unused: float, days_in_state: float) -> str:
    """The state after every transition that applies now (at most a few steps)."""
    for _ in range(len(STATES)):
        following = next_state(state, scores, days_unused=days_unused, days_in_state=days_in_state)
        if following == state:
            return state
        state, days_in_state = following, 0.0
    return state
