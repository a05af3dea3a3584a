"""Dates in ranked text: day format, LoCoMo stamps, relative dates resolved, query intent."""

from __future__ import annotations

from datetime import date

import pytest

from memory.temporal import (
    TimeIntent,
    date_prefix,
    format_day,
    mentions_time,
    parse_locomo_datetime,
    resolve_relative_dates,
    time_boosts,
    time_intent,
)

MONDAY = date(2023, 5, 8)  # 8 May 2023 was a Monday


def test_format_and_prefix() -> None:
    assert format_day(MONDAY) == "8 May 2023"
    assert date_prefix("Ana: hi", MONDAY) == "[8 May 2023] Ana: hi"
    assert date_prefix("Ana: hi", None) == "Ana: hi"


def test_parse_locomo_datetime() -> None:
    stamp = parse_locomo_datetime("1:56 pm on 8 May, 2023")
    assert stamp is not None and (stamp.date(), stamp.hour, stamp.minute) == (MONDAY, 13, 56)
    assert parse_locomo_datetime("sometime in May") is None


@pytest.mark.parametrize(
    ("said", "meant"),
    [
        ("I went there yesterday", "yesterday (7 May 2023)"),
        ("Last night was fun", "Last night (7 May 2023)"),
        ("see you tomorrow", "tomorrow (9 May 2023)"),
        ("we met today", "today (8 May 2023)"),
        ("three days ago", "three days ago (5 May 2023)"),
        ("2 weeks ago", "2 weeks ago (the week of 24 April 2023)"),
        ("a couple of months ago", "a couple of months ago (March 2023)"),
        ("a year ago", "a year ago (2022)"),
        ("last week", "last week (the week of 1 May 2023)"),
        ("next month", "next month (June 2023)"),
        ("last year", "last year (2022)"),
        ("this weekend", "this weekend (the weekend of 13 May 2023)"),
        ("last weekend", "last weekend (the weekend of 6 May 2023)"),
        ("next Friday", "next Friday (12 May 2023)"),
        ("last Friday", "last Friday (5 May 2023)"),
        ("on Monday", "on Monday (1 May 2023)"),
    ],
)
def test_relative_dates_resolve_against_the_day_said(said: str, meant: str) -> None:
    assert meant in resolve_relative_dates(said, MONDAY)


def test_resolution_keeps_the_text_and_needs_a_day() -> None:
    text = "Nothing relative here, just 4 May 2023."
    assert resolve_relative_dates(text, MONDAY) == text
    assert resolve_relative_dates("yesterday", None) == "yesterday"
    assert resolve_relative_dates("yesterdays are gone", MONDAY) == "yesterdays are gone"


def test_month_arithmetic_clamps_to_the_month_end() -> None:
    assert "(February 2023)" in resolve_relative_dates("last month", date(2023, 3, 31))
    assert "(January 2024)" in resolve_relative_dates("next month", date(2023, 12, 15))


def test_mentions_time() -> None:
    assert mentions_time("I went yesterday")
    assert mentions_time("back in 2019")
    assert mentions_time("on 4 May")
    assert not mentions_time("I like painting")


def test_time_intent_reads_when_and_spans() -> None:
    assert time_intent("When did Ana paint a sunrise?") == TimeIntent(asks_when=True)
    assert time_intent("What did Ana paint?") == TimeIntent()
    may = time_intent("What did Ana do in May 2023?")
    assert (may.start, may.end) == (date(2023, 5, 1), date(2023, 5, 31))
    assert time_intent("what happened in May?", MONDAY).end == date(2023, 5, 31)
    assert time_intent("what happened in May?").start is None  # no year, no today
    assert time_intent("plans made in 2022").start == date(2022, 1, 1)
    last = time_intent("What did I buy last month?", MONDAY)
    assert (last.start, last.end) == (date(2023, 4, 1), date(2023, 4, 30))
    week = time_intent("what did I do last week", MONDAY)
    assert (week.start, week.end) == (date(2023, 5, 1), date(2023, 5, 7))


def test_time_boosts_raise_dated_and_in_span_candidates() -> None:
    texts = {1: "I went yesterday", 2: "I like tea", 3: "tea again"}
    days = {1: MONDAY, 2: date(2023, 6, 1), 3: date(2023, 5, 20)}
    asks = time_boosts(TimeIntent(asks_when=True), texts, days.get)
    assert asks == {1: pytest.approx(1.15)}
    span = TimeIntent(False, date(2023, 5, 1), date(2023, 5, 31))
    assert time_boosts(span, texts, days.get) == {1: 1.3, 3: 1.3}
    assert time_boosts(TimeIntent(), texts, days.get) == {}
