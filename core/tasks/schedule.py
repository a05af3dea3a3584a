"""When a task runs: `when` as people write it (an ISO 8601 time, "in 2 hours", "tomorrow
at 9", "every day at 8:30", a five-field cron expression) parsed into a `Schedule`, and the
next run computed by APScheduler's triggers in the chat's time zone (`zoneinfo`).

Pure functions of their arguments (the time `now` included), so tests call them directly.
Every bad input raises `InputError` with a sentence the model can relay; nothing is stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core.errors import InputError

if TYPE_CHECKING:  # imported where used: a chat that schedules nothing never loads them
    from apscheduler.triggers.cron import CronTrigger

ScheduleKind = Literal["date", "cron", "interval"]
UNITS_S = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}  # fmt: skip
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_AMOUNT = r"(\d+(?:\.\d+)?|\ban?\b|\bone\b)"
_SPAN = re.compile(rf"{_AMOUNT}\s*([a-z]+)")
_RELATIVE = re.compile(rf"^in\s+((?:{_AMOUNT}\s*[a-z]+(?:\s*,\s*|\s+and\s+|\s+)?)+)$")
_EVERY_SPAN = re.compile(rf"^every\s+((?:{_AMOUNT}\s*)?[a-z]+)$")
_CLOCK = r"(\d{1,2})(?::(\d{2}))?\s*(am|pm)?"
_DAY_AT = re.compile(rf"^(today|tomorrow)?\s*(?:at\s+)?{_CLOCK}$")
_EVERY_AT = re.compile(rf"^(?:every\s+([a-z]+)|daily)\s+at\s+{_CLOCK}$")
_CRON_FIELD = re.compile(r"^[\d*/,\-A-Za-z?]+$")
CRON_SAMPLES = 12  # upcoming runs checked against the minimum interval


@dataclass(frozen=True)
class Schedule:
    """A parsed `when`: once at a time (`date`, ISO 8601 in UTC), on a cron expression, or
    every `expression` seconds; times are read in `timezone`."""

    kind: ScheduleKind
    expression: str
    timezone: str

    @property
    def repeats(self) -> bool:
        return self.kind != "date"

    def describe(self) -> str:
        """How `/tasks` shows it."""
        if self.kind == "date":
            return f"once at {format_local(parse_utc(self.expression), self.timezone)}"
        if self.kind == "interval":
            return f"every {format_span(int(self.expression))}"
        return f"cron '{self.expression}' ({self.timezone})"


def zone(name: str) -> ZoneInfo:
    """The time zone called `name` (IANA, e.g. Europe/Berlin), or a clear `InputError`."""
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError(
            f"unknown time zone {name!r}: use an IANA name such as Europe/Berlin,"
            " America/New_York or UTC"
        ) from None


def parse_when(when: str, tz_name: str, now: datetime, min_interval_s: float) -> Schedule:
    """`when` as a `Schedule` whose first run is after `now` (aware). Raises `InputError`
    for a time in the past, an unknown zone, an unparseable text, or repeats more often
    than `min_interval_s`."""
    tz = zone(tz_name)
    text = " ".join(when.strip().lower().split())
    if not text:
        raise InputError("when is empty: give a time (2026-12-24T18:00), 'in 2 hours' or a cron")
    for parse in (_relative, _every_span, _every_at, _cron, _day_at, _iso):
        schedule = parse(text, tz, now)
        if schedule is not None:
            check_schedule(schedule, now, min_interval_s)
            return schedule
    raise InputError(
        f"cannot read the time {when!r}: use an ISO 8601 time (2026-12-24T18:00), a relative"
        " one ('in 30 seconds', 'in 2 hours', 'tomorrow at 9'), 'every day at 8:30',"
        " 'every 2 hours', or a five-field cron expression ('0 8 * * mon')"
    )


def check_schedule(schedule: Schedule, now: datetime, min_interval_s: float) -> None:
    """The first run is in the future, and repeats are at least `min_interval_s` apart."""
    first = next_run(schedule, now)
    if first is None or first <= now:
        raise InputError("that time is in the past; give a time in the future")
    if schedule.kind == "interval" and int(schedule.expression) < min_interval_s:
        raise InputError(
            f"a task may repeat at most every {format_span(int(min_interval_s))}"
            f" (asked: every {format_span(int(schedule.expression))})"
        )
    if schedule.kind == "cron":
        runs = [first]
        for _ in range(CRON_SAMPLES):
            following = next_run(schedule, runs[-1])
            if following is None:
                break
            runs.append(following)
        gaps = [(b - a).total_seconds() for a, b in zip(runs, runs[1:], strict=False)]
        if gaps and min(gaps) < min_interval_s:
            raise InputError(
                f"the cron expression '{schedule.expression}' fires every"
                f" {format_span(int(min(gaps)))}; a task may repeat at most every"
                f" {format_span(int(min_interval_s))}"
            )


def next_run(schedule: Schedule, after: datetime) -> datetime | None:
    """The first run strictly after `after` (aware, UTC), or None when there is none."""
    tz = zone(schedule.timezone)
    after = after.astimezone(UTC)
    if schedule.kind == "date":
        at = parse_utc(schedule.expression)
        return at if at > after else None
    if schedule.kind == "interval":
        return _interval_run(schedule, after + timedelta(seconds=int(schedule.expression)), after)
    trigger = cron_trigger(schedule.expression, tz)
    found = trigger.get_next_fire_time(None, after + timedelta(microseconds=1))
    # Autumn: a wall time that happens twice (02:30 CEST, then 02:30 CET) runs once.
    local_after = after.astimezone(tz).replace(tzinfo=None)
    while found is not None and found.replace(tzinfo=None) == local_after:
        found = trigger.get_next_fire_time(found, found)
    return found.astimezone(UTC) if found is not None else None


def following_run(schedule: Schedule, due: datetime, now: datetime) -> datetime | None:
    """The run after the one due at `due`, skipping those already past at `now` (a bot that
    was down runs a repeating task once, not once per missed time); None for a one-off."""
    if schedule.kind == "date":
        return None
    if schedule.kind == "interval":
        return _interval_run(schedule, due + timedelta(seconds=int(schedule.expression)), now)
    return next_run(schedule, max(due, now))


def _interval_run(schedule: Schedule, anchor: datetime, after: datetime) -> datetime | None:
    """The first run of an `IntervalTrigger` started at `anchor`, strictly after `after`."""
    from apscheduler.triggers.interval import IntervalTrigger

    trigger = IntervalTrigger(
        seconds=int(schedule.expression), start_date=anchor, timezone=zone(schedule.timezone)
    )
    found = trigger.get_next_fire_time(None, max(anchor, after + timedelta(microseconds=1)))
    return found.astimezone(UTC) if found is not None else None


def cron_trigger(expression: str, tz: ZoneInfo) -> CronTrigger:
    from apscheduler.triggers.cron import CronTrigger

    fields = expression.split()
    if len(fields) != 5 or not all(_CRON_FIELD.match(field) for field in fields):
        raise InputError(
            f"{expression!r} is not a five-field cron expression (minute hour day month"
            " weekday); seconds are not allowed"
        )
    try:
        return CronTrigger.from_crontab(expression, timezone=tz)
    except ValueError as exc:
        raise InputError(f"bad cron expression {expression!r}: {exc}") from None


def parse_utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def format_local(at: datetime, tz_name: str) -> str:
    """`2026-12-24 18:00 CET`: a time as the chat reads it."""
    local = at.astimezone(zone(tz_name))
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()}"


def format_span(seconds: int) -> str:
    for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


# --- the forms of `when` ----------------------------------------------------------------


def _amount(text: str) -> float:
    return 1.0 if text in ("a", "an", "one") else float(text)


def _seconds(spans: str) -> float | None:
    total = 0.0
    for amount, unit in _SPAN.findall(spans):
        if unit not in UNITS_S:
            return None
        total += _amount(amount) * UNITS_S[unit]
    return total


def _once(at: datetime, tz: ZoneInfo) -> Schedule:
    utc = at.astimezone(UTC).replace(microsecond=0)
    return Schedule("date", utc.isoformat(), tz.key)


def _relative(text: str, tz: ZoneInfo, now: datetime) -> Schedule | None:
    match = _RELATIVE.match(text)
    seconds = _seconds(match.group(1)) if match else None
    if seconds is None:
        return None
    return _once(now + timedelta(seconds=max(seconds, 1.0)), tz)


def _every_span(text: str, tz: ZoneInfo, now: datetime) -> Schedule | None:
    match = _EVERY_SPAN.match(text)
    if not match:
        return None
    spans = match.group(1)
    seconds = _seconds(spans if spans[0].isdigit() or " " in spans else f"1 {spans}")
    if seconds is None:
        return None
    return Schedule("interval", str(int(seconds)), tz.key)


def _clock(hour: str, minute: str | None, half: str | None) -> tuple[int, int]:
    h, m = int(hour), int(minute or 0)
    if half:
        if not 1 <= h <= 12:
            raise InputError(f"{hour}{half} is not a time of day")
        h = h % 12 + (12 if half == "pm" else 0)
    if h > 23 or m > 59:
        raise InputError(f"{hour}:{minute or '00'} is not a time of day")
    return h, m


def _every_at(text: str, tz: ZoneInfo, now: datetime) -> Schedule | None:
    match = _EVERY_AT.match(text)
    if not match:
        return None
    day, hour, minute, half = match.groups()
    h, m = _clock(hour, minute, half)
    if day in (None, "day"):
        weekday = "*"
    elif day in WEEKDAYS or day in WEEKDAY_NAMES:
        weekday = day[:3]
    elif day == "weekday":
        weekday = "mon-fri"
    else:
        return None
    return Schedule("cron", f"{m} {h} * * {weekday}", tz.key)


def _cron(text: str, tz: ZoneInfo, now: datetime) -> Schedule | None:
    fields = text.split()
    if len(fields) < 5 or not all(_CRON_FIELD.match(field) for field in fields):
        return None
    if not any(ch in fields[0] for ch in "*/,-") and not fields[0].isdigit():
        return None
    cron_trigger(text, tz)  # five fields, valid; raises a clear error otherwise
    return Schedule("cron", text, tz.key)


def _day_at(text: str, tz: ZoneInfo, now: datetime) -> Schedule | None:
    match = _DAY_AT.match(text)
    if not match or (match.group(1) is None and "at" not in text and ":" not in text):
        return None
    day, hour, minute, half = match.groups()
    h, m = _clock(hour, minute, half)
    local_now = now.astimezone(tz)
    at = datetime(local_now.year, local_now.month, local_now.day, h, m, tzinfo=tz)
    if day == "tomorrow" or day is None and at <= local_now:
        at = datetime.combine(local_now.date() + timedelta(days=1), at.timetz())
    return _once(at, tz)


def _iso(text: str, tz: ZoneInfo, now: datetime) -> Schedule | None:
    candidate = text.upper().replace(" ", "T", 1) if "t" not in text else text.upper()
    try:
        at = datetime.fromisoformat(candidate)
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=tz)
    return _once(at, tz)
