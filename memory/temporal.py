"""Dates in ranked text and in queries: day formats, relative-date resolution, time intent.

Pure functions. `resolve_relative_dates` rewrites "yesterday", "last week", "next Friday",
"three days ago" … as the same words followed by the absolute date they meant, measured from
the day the text was said. `time_intent` reads a query's temporal intent ("when", "in May",
"last week") without a model call; `time_boosts` turns it into per-candidate score factors.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta

MONTHS = {name.lower(): number for number, name in enumerate(calendar.month_name) if name}
MONTHS.update({name.lower(): number for number, name in enumerate(calendar.month_abbr) if name})
WEEKDAYS = {name.lower(): number for number, name in enumerate(calendar.day_name)}
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "a couple of": 2,
    "couple of": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_NUMBER = "(" + "|".join([r"\d{1,2}", *sorted(_NUMBERS, key=len, reverse=True)]) + ")"
_WEEKDAY = "(monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_RELATIVE = re.compile(
    r"\b(?:"
    r"(?P<day>today|tonight|yesterday|tomorrow|last night|this (?:morning|afternoon|evening))"
    rf"|(?P<ago_n>{_NUMBER}) (?P<ago_unit>day|week|month|year)s? ago"
    r"|(?P<which>last|this|next|past) (?P<unit>week|weekend|month|year)"
    rf"|(?P<wd_which>last|this|next|on) (?P<weekday>{_WEEKDAY})"
    r")\b",
    re.IGNORECASE,
)
_WHEN_WORDS = re.compile(
    r"\b(when|what (?:date|day|month|year|time)|how long ago|which (?:day|month|year))\b",
    re.IGNORECASE,
)
_IN_MONTH = re.compile(
    r"\b(?:in|during|on|since|by) (?:early |mid |late |mid-)?(?P<month>"
    + "|".join(sorted(MONTHS, key=len, reverse=True))
    + r")\.?(?:,? (?P<year>(?:19|20)\d\d))?\b",
    re.IGNORECASE,
)
_IN_YEAR = re.compile(r"\b(?:in|during|since) (?P<year>(?:19|20)\d\d)\b", re.IGNORECASE)
_ABSOLUTE = re.compile(
    r"\b(?:\d{1,2} (?:"
    + "|".join(name.lower() for name in calendar.month_name if name)
    + r")|(?:19|20)\d\d)\b",
    re.IGNORECASE,
)


def format_day(day: date) -> str:
    """`8 May 2023`: the form dates take in ranked and injected text."""
    return f"{day.day} {calendar.month_name[day.month]} {day.year}"


def date_prefix(text: str, day: date | None) -> str:
    """`[8 May 2023] text`: a memory or message with the day it was said in its ranked text."""
    return f"[{format_day(day)}] {text}" if day is not None else text


def parse_locomo_datetime(text: str) -> datetime | None:
    """LoCoMo's session stamps, e.g. `1:56 pm on 8 May, 2023` (None when not of that form)."""
    try:
        return datetime.strptime(" ".join(text.split()).replace(" on ", " "), "%I:%M %p %d %B, %Y")
    except ValueError:
        return None


def _month_shift(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    return date(year, month + 1, min(day.day, calendar.monthrange(year, month + 1)[1]))


def _week_of(day: date) -> str:
    return f"the week of {format_day(day - timedelta(days=day.weekday()))}"


def _month_name(day: date) -> str:
    return f"{calendar.month_name[day.month]} {day.year}"


def _resolve_day(word: str, said: date) -> str:
    if word == "yesterday" or word == "last night":
        return format_day(said - timedelta(days=1))
    if word == "tomorrow":
        return format_day(said + timedelta(days=1))
    return format_day(said)


def _resolve_ago(count_word: str, unit: str, said: date) -> str:
    count = int(count_word) if count_word.isdigit() else _NUMBERS[count_word]
    if unit == "day":
        return format_day(said - timedelta(days=count))
    if unit == "week":
        return _week_of(said - timedelta(weeks=count))
    if unit == "month":
        return _month_name(_month_shift(said, -count))
    return str(said.year - count)


def _resolve_unit(which: str, unit: str, said: date) -> str:
    step = {"last": -1, "past": -1, "this": 0, "next": 1}[which]
    if unit == "week":
        return _week_of(said + timedelta(weeks=step))
    if unit == "month":
        return _month_name(_month_shift(said, step))
    if unit == "year":
        return str(said.year + step)
    saturday = said + timedelta(days=(5 - said.weekday()) % 7)  # this weekend's Saturday
    if said.weekday() == 6:
        saturday = said - timedelta(days=1)
    return f"the weekend of {format_day(saturday + timedelta(weeks=step))}"


def _resolve_weekday(which: str, weekday: str, said: date) -> str:
    target = WEEKDAYS[weekday]
    if which == "next":
        ahead = (target - said.weekday()) % 7 or 7
        return format_day(said + timedelta(days=ahead))
    if which == "this":
        return format_day(said + timedelta(days=target - said.weekday()))
    back = (said.weekday() - target) % 7 or 7  # "last"/"on": the most recent one before
    return format_day(said - timedelta(days=back))


def resolve_phrase(match: re.Match[str], said: date) -> str:
    """The absolute date (or week, month, year) one relative phrase meant on day `said`."""
    found = {key: (value or "").lower() for key, value in match.groupdict().items()}
    if found["day"]:
        return _resolve_day(found["day"], said)
    if found["ago_n"]:
        return _resolve_ago(found["ago_n"], found["ago_unit"], said)
    if found["unit"]:
        return _resolve_unit(found["which"], found["unit"], said)
    return _resolve_weekday(found["wd_which"], found["weekday"], said)


def resolve_relative_dates(text: str, said: date | None) -> str:
    """`text` with each relative date followed by what it meant: `yesterday (7 May 2023)`."""
    if said is None:
        return text
    return _RELATIVE.sub(lambda m: f"{m.group(0)} ({resolve_phrase(m, said)})", text)


def mentions_time(text: str) -> bool:
    """Whether a text names a time: a relative phrase or a day/month/year."""
    return bool(_RELATIVE.search(text) or _ABSOLUTE.search(text) or _IN_MONTH.search(text))


@dataclass(frozen=True)
class TimeIntent:
    """What a query says about time: it asks when, and/or it names a span [start, end]."""

    asks_when: bool = False
    start: date | None = None
    end: date | None = None

    @property
    def any(self) -> bool:
        return self.asks_when or self.start is not None


def _span_of_phrase(match: re.Match[str], today: date) -> tuple[date, date] | None:
    found = {key: (value or "").lower() for key, value in match.groupdict().items()}
    if found["unit"] == "month":
        first = _month_shift(
            today.replace(day=1), {"last": -1, "past": -1, "this": 0}.get(found["which"], 1)
        )
        return first, _month_shift(first, 1) - timedelta(days=1)
    if found["unit"] == "year":
        year = today.year + {"last": -1, "past": -1, "this": 0}.get(found["which"], 1)
        return date(year, 1, 1), date(year, 12, 31)
    if found["unit"] in ("week", "weekend"):
        step = {"last": -1, "past": -1, "this": 0}.get(found["which"], 1)
        monday = today - timedelta(days=today.weekday()) + timedelta(weeks=step)
        return monday, monday + timedelta(days=6)
    return None


def time_intent(query: str, today: date | None = None) -> TimeIntent:
    """The query's temporal intent; relative spans ("last month") need `today`."""
    asks = bool(_WHEN_WORDS.search(query))
    month = _IN_MONTH.search(query)
    if month:
        number = MONTHS[month.group("month").lower()]
        year = int(month.group("year") or (today.year if today else 0)) or None
        if year is not None:
            end = date(year, number, calendar.monthrange(year, number)[1])
            return TimeIntent(asks, date(year, number, 1), end)
    year_match = _IN_YEAR.search(query)
    if year_match:
        year = int(year_match.group("year"))
        return TimeIntent(asks, date(year, 1, 1), date(year, 12, 31))
    relative = _RELATIVE.search(query)
    if relative and today is not None:
        span = _span_of_phrase(relative, today)
        if span:
            return TimeIntent(asks, *span)
    return TimeIntent(asks)


def _within(intent: TimeIntent, day: date | None) -> bool:
    if day is None or intent.start is None or intent.end is None:
        return False
    return intent.start <= day <= intent.end


def time_boosts(
    intent: TimeIntent,
    candidates: Mapping[int, str],
    day_of: Callable[[int], date | None],
    *,
    when_boost: float = 0.15,
    span_boost: float = 0.3,
) -> dict[int, float]:
    """Score factors (≥ 1) for candidates: those naming a time when the query asks "when",
    those said within the query's span when it names one. Others are left out (factor 1)."""
    factors: dict[int, float] = {}
    for item, text in candidates.items():
        factor = 1.0
        if intent.asks_when and mentions_time(text):
            factor += when_boost
        if _within(intent, day_of(item) if intent.start is not None else None):
            factor += span_boost
        if factor != 1.0:
            factors[item] = factor
    return factors
