"""Splitting a long Markdown reply into messages a platform accepts (Telegram 4,096, Discord 2,000).

Breaks go, in order of preference, at paragraph boundaries and around code blocks, then
at line ends outside code, then at line ends inside code (the fence is closed at the end
of one message and reopened, with its language, at the start of the next), and only for
a line longer than a message at a space or, failing that, anywhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Measure = Callable[[str], int]
Role = Literal["text", "open", "body", "close"]

FENCE = re.compile(r"^ {0,3}(?P<marker>`{3,}|~{3,})(?P<info>[^\n]*)\n?$")


@dataclass(frozen=True)
class Segment:
    """A line (or a piece of an over-long line) and its place relative to a code fence."""

    text: str
    role: Role
    fence: str = ""  # the opening fence line of the block this segment belongs to
    closer: str = ""  # the marker that closes that block, e.g. "```"


def split_message(text: str, limit: int, measure: Measure = len) -> list[str]:
    """Cut `text` into messages of at most `limit` units of `measure` (whitespace-only dropped)."""
    if limit < 40:
        raise ValueError("limit must be at least 40")
    if measure(text) <= limit:
        return [text] if text.strip() else []
    segments = _segments(text, limit)
    sizes = [measure(segment.text) for segment in segments]
    chunks: list[str] = []
    start = 0
    while start < len(segments):
        end = _best_end(segments, sizes, start, limit, measure)
        chunk = _render(segments, start, end).strip("\n")
        if chunk.strip():
            chunks.append(chunk)
        start = end + 1
    return chunks


def _segments(text: str, limit: int) -> list[Segment]:
    """Lines tagged with their fence role; lines too long for one message are cut in pieces."""
    segments: list[Segment] = []
    fence = closer = ""
    for line in text.splitlines(keepends=True):
        match = FENCE.match(line)
        role: Role
        if not fence and match and len(line) <= limit // 4 and _may_open(match):
            fence, closer = line if line.endswith("\n") else line + "\n", match["marker"]
            role = "open"
        elif fence and match and _closes(match, closer):
            role = "close"
        else:
            role = "body" if fence else "text"
        segments.extend(
            Segment(piece, role, fence, closer) for piece in _cut_line(line, limit // 4)
        )
        if role == "close":
            fence = closer = ""
    return segments


def _may_open(match: re.Match[str]) -> bool:
    return not (match["marker"].startswith("`") and "`" in match["info"])


def _closes(match: re.Match[str], closer: str) -> bool:
    marker = match["marker"]
    return marker[0] == closer[0] and len(marker) >= len(closer) and not match["info"].strip()


def _cut_line(line: str, size: int) -> list[str]:
    """`line` in pieces of at most `size` characters, cut after a space where possible."""
    pieces: list[str] = []
    while len(line) > size:
        cut = line.rfind(" ", size // 2, size) + 1 or size
        pieces.append(line[:cut])
        line = line[cut:]
    if line:
        pieces.append(line)
    return pieces


def _best_end(
    segments: list[Segment], sizes: list[int], start: int, limit: int, measure: Measure
) -> int:
    """Index of the last segment of the message that begins at `start`."""
    prefix = _reopen(segments[start])
    used = measure(prefix)
    best, best_key = start, (-1, start)
    for end in range(start, len(segments)):
        used += sizes[end]
        if end > start and used + measure(_close(segments[end])) > limit:
            break
        score = _break_score(segments, end)
        key = (score if used >= limit // 2 else -1, end)
        if end == len(segments) - 1 or key > best_key:
            best, best_key = end, key
    return best


def _break_score(segments: list[Segment], end: int) -> int:
    """How good a place the gap after `segments[end]` is for a message break (higher is better)."""
    if end == len(segments) - 1:
        return 4
    here, after = segments[end], segments[end + 1]
    if not here.text.endswith("\n"):
        return 0
    if (here.role == "text" and not here.text.strip()) or here.role == "close":
        return 3
    if after.role == "open":
        return 3
    return 2 if here.role == "text" else 1


def _reopen(first: Segment) -> str:
    return first.fence if first.role in ("body", "close") else ""


def _close(last: Segment) -> str:
    if last.role not in ("open", "body"):
        return ""
    return ("" if last.text.endswith("\n") else "\n") + last.closer


def _render(segments: list[Segment], start: int, end: int) -> str:
    body = "".join(segment.text for segment in segments[start : end + 1])
    return _reopen(segments[start]) + body + _close(segments[end])
