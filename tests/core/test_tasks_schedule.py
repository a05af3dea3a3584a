"""When a task runs: `when` parsed into a schedule, bad input refused with a clear error, and
the next runs computed in the chat's time zone across daylight-saving changes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.errors import InputError
from core.tasks.schedule import Schedule, following_run, next_run, parse_when

NOW = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)  # 11:00 in Berlin (CET)
MIN_S = 300.0


def parse(when: str, tz: str = "Europe/Berlin") -> Schedule:
    return parse_when(when, tz, NOW, MIN_S)


@pytest.mark.parametrize(
    ("when", "first"),
    [
        ("in 30 seconds", datetime(2026, 11, 26, 10, 0, 30, tzinfo=UTC)),
        ("in 2 hours", datetime(2026, 11, 26, 12, 0, tzinfo=UTC)),
        ("in 1 hour and 30 minutes", datetime(2026, 11, 26, 11, 30, tzinfo=UTC)),
        ("in an hour", datetime(2026, 11, 26, 11, 0, tzinfo=UTC)),
        ("tomorrow at 9", datetime(2026, 11, 27, 8, 0, tzinfo=UTC)),  # 09:00 CET
        ("at 9pm", datetime(2026, 11, 26, 20, 0, tzinfo=UTC)),
        ("2026-12-24T18:00", datetime(2026, 12, 24, 17, 0, tzinfo=UTC)),  # read in Berlin
        ("2026-12-24T18:00:00Z", datetime(2026, 12, 24, 18, 0, tzinfo=UTC)),  # its own zone
        ("every day at 8:30", datetime(2026, 11, 27, 7, 30, tzinfo=UTC)),
        ("every monday at 8", datetime(2026, 11, 30, 7, 0, tzinfo=UTC)),
        ("every weekday at 9", datetime(2026, 11, 27, 8, 0, tzinfo=UTC)),  # a Friday
        ("every sun at 9", datetime(2026, 11, 29, 8, 0, tzinfo=UTC)),
        ("0 8 * * 1-5", datetime(2026, 11, 27, 7, 0, tzinfo=UTC)),
        ("every 2 hours", datetime(2026, 11, 26, 12, 0, tzinfo=UTC)),
    ],
)
def test_when_is_read_in_the_chats_time_zone(when: str, first: datetime) -> None:
    schedule = parse(when)
    assert next_run(schedule, NOW) == first
    assert schedule.repeats == (when.startswith("every") or when[0].isdigit() and " * " in when)


@pytest.mark.parametrize(
    ("when", "says"),
    [
        ("2020-01-01T09:00", "in the past"),
        ("today at 9", "in the past"),  # 09:00 Berlin is already over at 11:00
        ("next blue moon", "cannot read the time"),
        ("in 2 lightyears", "cannot read the time"),
        ("", "when is empty"),
        ("* * * * *", "fires every 1 minute"),
        ("*/2 * * * *", "fires every 2 minutes"),
        ("* * * * * *", "not a five-field cron expression"),
        ("every 10 seconds", "at most every 5 minutes"),
        ("61 25 * * *", "bad cron expression"),
        ("at 25:00", "not a time of day"),
        ("every monkey at 8", "cannot read the time"),
    ],
)
def test_bad_when_is_a_clear_error(when: str, says: str) -> None:
    with pytest.raises(InputError, match=says):
        parse(when)


def test_an_unknown_time_zone_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="unknown time zone 'Mars/Olympus'"):
        parse("in 2 hours", tz="Mars/Olympus")


def runs(schedule: Schedule, start: datetime, count: int) -> list[datetime]:
    found: list[datetime] = []
    due = next_run(schedule, start)
    while due is not None and len(found) < count:
        found.append(due)
        due = following_run(schedule, due, due)
    return found


def test_a_daily_0230_task_runs_once_a_day_across_the_march_change() -> None:
    """Berlin skips 02:00-03:00 on 29 March 2026: that day's run comes at the first instant
    after the gap (03:30 CEST), every other day at 02:30 local, never twice a day."""
    schedule = parse_when("30 2 * * *", "Europe/Berlin", datetime(2026, 3, 20, tzinfo=UTC), MIN_S)
    found = runs(schedule, datetime(2026, 3, 27, 12, tzinfo=UTC), 4)
    assert found == [
        datetime(2026, 3, 28, 1, 30, tzinfo=UTC),  # 02:30 CET
        datetime(2026, 3, 29, 1, 30, tzinfo=UTC),  # the gap day: 03:30 CEST
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),  # 02:30 CEST
        datetime(2026, 3, 31, 0, 30, tzinfo=UTC),
    ]
    assert len({run.date() for run in found}) == 4


def test_a_daily_0230_task_runs_once_on_the_october_change() -> None:
    """02:30 happens twice on 25 October 2026 (CEST, then CET): the task runs once."""
    schedule = parse_when("30 2 * * *", "Europe/Berlin", datetime(2026, 10, 20, tzinfo=UTC), MIN_S)
    found = runs(schedule, datetime(2026, 10, 24, 12, tzinfo=UTC), 3)
    assert found == [
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),  # 02:30 CEST
        datetime(2026, 10, 26, 1, 30, tzinfo=UTC),  # 02:30 CET the next day
        datetime(2026, 10, 27, 1, 30, tzinfo=UTC),
    ]


def test_a_repeating_task_late_after_downtime_skips_to_its_next_run() -> None:
    hourly = parse("every 1 hour")
    due = datetime(2026, 11, 26, 11, 0, tzinfo=UTC)
    back = datetime(2026, 11, 26, 15, 20, tzinfo=UTC)  # down for hours
    assert following_run(hourly, due, back) == datetime(2026, 11, 26, 16, 0, tzinfo=UTC)
    daily = parse("every day at 8:30")
    assert following_run(daily, due, back) == datetime(2026, 11, 27, 7, 30, tzinfo=UTC)
    once = parse("in 2 hours")
    assert following_run(once, due, back) is None
