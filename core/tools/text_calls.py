"""Tool calls a model wrote as text instead of a structured call: found and cut out.

Small models and some templates spell a call out in the reply: `functions.name: {…}` (as
llama-cpp-python's chatml-function-calling renders calls), `<tool_call>…</tool_call>`
(Hermes, Qwen), or a bare JSON `{"name": …, "arguments": …}`. Such text means nothing to
a user, so the turn loop never shows or stores it (`strip_tool_text`).
"""

from __future__ import annotations

import json
import re
from typing import Any

_FUNCTIONS = re.compile(r"(?<![\w.])functions\.[\w\-]+\s*:\s*(?=\{|\Z)")
_TAGGED = re.compile(
    r"<(tool_call|function_call)>.*?(?:</\1>|\Z)|\[TOOL_CALLS\]", re.IGNORECASE | re.DOTALL
)
_EMPTY_FENCE = re.compile(r"```[\w-]*\s*```")
_BLANK_LINES = re.compile(r"\n{3,}")
_DECODER = json.JSONDecoder()


def is_call_shape(value: Any) -> bool:
    """Whether a decoded JSON value looks like one or more tool calls."""
    if isinstance(value, list):
        return bool(value) and all(is_call_shape(item) for item in value)
    if not isinstance(value, dict):
        return False
    function = value.get("function")
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return True
    if "tool_calls" in value:
        return is_call_shape(value["tool_calls"])
    return isinstance(value.get("name"), str) and ("arguments" in value or "parameters" in value)


def decode_at(text: str, start: int) -> tuple[Any, int] | None:
    """(the JSON value starting at `start`, where it ends), or None if none parses there."""
    try:
        return _DECODER.raw_decode(text, start)
    except ValueError:
        return None


def balanced_end(text: str, start: int) -> int:
    """Where the braces opened at `start` close (the end of `text` if they never do)."""
    depth = 0
    for index in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return index + 1
    return len(text)


def _function_spans(text: str) -> list[tuple[int, int]]:
    """`functions.name:` markers with the arguments that follow them."""
    spans = []
    for match in _FUNCTIONS.finditer(text):
        end = match.end()
        if text[end : end + 1] == "{":
            decoded = decode_at(text, end)
            end = decoded[1] if decoded else balanced_end(text, end)
        spans.append((match.start(), end))
    return spans


def _json_spans(text: str) -> list[tuple[int, int]]:
    """Bare JSON objects or lists that are shaped like tool calls (other JSON is kept
    whole, calls nested inside it too)."""
    spans: list[tuple[int, int]] = []
    index = 0
    while index < len(text):
        decoded = decode_at(text, index) if text[index] in "{[" else None
        if decoded is None:
            index += 1
            continue
        value, end = decoded
        if is_call_shape(value):
            spans.append((index, end))
        index = end
    return spans


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    kept, position = [], 0
    for start, end in sorted(spans):
        if start >= position:
            kept.append(text[position:start])
            position = end
        else:
            position = max(position, end)
    kept.append(text[position:])
    return "".join(kept)


def strip_tool_text(text: str) -> tuple[str, int]:
    """(`text` without tool calls written as text, how many pieces were cut out)."""
    spans = [(m.start(), m.end()) for m in _TAGGED.finditer(text)]
    rest = _cut(text, spans)
    more = _function_spans(rest)
    rest = _cut(rest, more)
    bare = _json_spans(rest)
    rest = _cut(rest, bare)
    found = len(spans) + len(more) + len(bare)
    if found:
        rest = _BLANK_LINES.sub("\n\n", _EMPTY_FENCE.sub("", rest))
    return rest.strip(), found
