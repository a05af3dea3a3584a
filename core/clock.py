"""The time in UTC, and the one text form every Mnemo table stores it in."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    """Now, as an aware datetime in UTC."""
    return datetime.now(UTC)


def iso_utc(moment: datetime) -> str:
    """`moment` as stored: `YYYY-MM-DDTHH:MM:SS.fffZ` in UTC (sorts as text)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def now_iso() -> str:
    """Now, in the stored text form."""
    return iso_utc(utc_now())
