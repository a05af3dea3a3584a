"""Text helpers shared by every package: storing text safely, clipping it, removing reasoning."""

from __future__ import annotations

import re

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
