"""Key items of tool results for the reflector (AceClaw): errors, file paths and decisions.

The reflector's transcript holds what the user and the assistant said; a tool result is
too long and too noisy to pass whole, but what it says about errors, the files it touched
and the decisions it records is often what memory must keep before a compaction
summarises it away. `key_items` picks those out, as one short line per result.
"""

from __future__ import annotations

import re

MAX_LINE_CHARS = 160
SCAN_CHARS = 50_000
MAX_ERRORS = 3
MAX_PATHS = 8
MAX_DECISIONS = 3
_ERROR = re.compile(
    r"\b(error|errors|failed|failure|exception|traceback|denied|refused|not found|timed out)\b",
    re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(decided|decision|chose|chosen|agreed|approved|selected|will use|going with)\b",
    re.IGNORECASE,
)
_PATH = re.compile(
    r"(?<![\w./~-])(?:~|\.{1,2})?/?(?:[\w.-]++/)++[\w.-]+"
    r"|(?<![\w-])[\w-]+\.(?:py|md|json|toml|ya?ml|txt|csv|js|ts|sh|sql|log|cfg|ini|conf)\b"
)


def _lines(text: str, pattern: re.Pattern[str], limit: int) -> list[str]:
    found: list[str] = []
    for line in text.splitlines():
        line = " ".join(line.split())
        if line and pattern.search(line) and line not in found:
            found.append(line[:MAX_LINE_CHARS])
            if len(found) == limit:
                break
    return found


def key_items(text: str) -> str:
    """`error: …; paths: …; decision: …` for a tool result ("" when it holds none); only
    its first `SCAN_CHARS` are read."""
    text = text[:SCAN_CHARS]
    errors = _lines(text, _ERROR, MAX_ERRORS)
    decisions = _lines(text, _DECISION, MAX_DECISIONS)
    paths = list(dict.fromkeys(match.rstrip(".") for match in _PATH.findall(text)))[:MAX_PATHS]
    parts = [f"error: {line}" for line in errors]
    if paths:
        parts.append(f"paths: {', '.join(paths)}")
    parts += [f"decision: {line}" for line in decisions]
    return "; ".join(parts)
