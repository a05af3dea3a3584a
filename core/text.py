"""Text helpers shared by every package: storing text safely, clipping and capping it,
removing reasoning, reading a whole number someone typed."""

from __future__ import annotations

import re

FENCE_CLOSE = "\n```"
_THINK = re.compile(r"<(think|thinking|reasoning)>.*?(</\1>|\Z)", re.IGNORECASE | re.DOTALL)


def clean_text(text: str) -> str:
    """Text safe to store: valid UTF-8, no NUL bytes, platform line endings unified."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text.replace("\x00", "").replace("\r\n", "\n")


def clip_middle(text: str, limit: int, head_ratio: float = 0.7, tail_ratio: float = 0.2) -> str:
    """Cut `text` to about `limit` chars keeping 70% head and 20% tail around a marker."""
    if len(text) <= limit:
        return text
    head = int(limit * head_ratio)
    tail = int(limit * tail_ratio)
    removed = len(text) - head - tail
    return f"{text[:head]}\n[truncated: {removed} chars]\n{text[len(text) - tail :]}"


def strip_think(text: str) -> str:
    """`text` without `<think>`, `<thinking>` or `<reasoning>` blocks (an unterminated one
    runs to the end), stripped of surrounding whitespace."""
    return _THINK.sub("", text).strip()


MAX_WHOLE_DIGITS = 18  # every such number fits in a signed 64-bit column


def whole_number(text: str, max_digits: int = MAX_WHOLE_DIGITS) -> int | None:
    """The non-negative whole number `text` spells in ASCII digits (surrounding spaces
    allowed) in at most `max_digits` digits, else None. `str.isdigit` alone is not enough:
    it accepts "²" and "٣", which `int()` then refuses or reads as another number, and a
    30-digit id overflows a database column (callers that range-check may allow more)."""
    value = text.strip()
    if not value.isascii() or not value.isdigit() or len(value) > max_digits:
        return None
    return int(value)


def cap_reply(text: str, limit: int) -> str:
    """`text` when it fits in `limit` characters, else its head (cut at a line or word break,
    an open code fence closed) and a note saying how much was cut. The result never exceeds
    `limit`, so capping a capped reply changes nothing."""
    if len(text) <= limit:
        return text
    note = f"\n\n… [reply cut at {{:,}} of {len(text):,} characters]"
    head = text[: limit - len(note.format(limit)) - len(FENCE_CLOSE)]
    lower = len(head) * 4 // 5  # a line break in the last fifth, else a space, else a hard cut
    cut = head.rfind("\n", lower)
    cut = cut if cut > 0 else head.rfind(" ", lower)
    head = head[:cut] if cut > 0 else head
    fence = FENCE_CLOSE if head.count("```") % 2 else ""
    return head + fence + note.format(len(head))
