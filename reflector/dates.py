"""Absolute dates in what the reflector learns: each message's day is shown in the
transcript, the prompt asks for absolute dates, and a fact that still says "yesterday" or
"next Friday" gets the date it meant, read from the day of the message it came from (the
batch's message sharing most of its words), in the chat's time zone (`[memory] timezone`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from zoneinfo import ZoneInfo

from core.storage.store import StoredMessage
from memory.temporal import format_day, resolve_relative_dates
from memory.terms import content_terms

UTC = ZoneInfo("UTC")

DATE_RULE = (
    "- Dates: each message's day is given in the transcript (`(day: 8 May 2023)` lines"
    " start a new day). Write absolute dates in facts: resolve words like yesterday, last"
    ' week or next Friday against the day of the message that says them ("went hiking'
    ' on 7 May 2023", not "went hiking yesterday").'
)


def message_day(message: StoredMessage, zone: ZoneInfo = UTC) -> date | None:
    """The day a stored message was said, in `zone`."""
    try:
        moment = datetime.fromisoformat(message.created_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(zone).date()


def day_header(day: date) -> str:
    """The transcript line that starts a new day."""
    return f"(day: {format_day(day)})"


def first_day_note(days: Sequence[date]) -> str:
    """The line of the request that dates the transcript's first message."""
    return f"The first new message was said on {format_day(days[0])}." if days else ""


class FactDates:
    """Resolves the relative dates a fact still holds against its source message's day."""

    def __init__(self, messages: Sequence[StoredMessage], zone: ZoneInfo = UTC) -> None:
        self.sources = [
            (frozenset(content_terms(m.content)), day)
            for m in messages
            if m.role in ("user", "assistant") and (day := message_day(m, zone)) is not None
        ]

    def source_day(self, fact: str) -> date | None:
        """The day of the message sharing most words with `fact` (the newest on a tie)."""
        words = set(content_terms(fact))
        best: tuple[int, int] = (0, -1)
        for index, (terms, _) in enumerate(self.sources):
            best = max(best, (len(words & terms), index))
        return self.sources[best[1]][1] if best[1] >= 0 else None

    def absolute(self, fact: str) -> str:
        """`fact` with each relative date followed by the date it meant."""
        return resolve_relative_dates(fact, self.source_day(fact))
