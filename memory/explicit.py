"""Explicit memory without a model call: `remember: …`, `remember that …`, `memo: …`, `记住：…`."""

from __future__ import annotations

import re

_PREFIX = re.compile(
    r"^\s*(?:remember\s*:|remember\s+that\b|memo\s*:|记住\s*[:：])\s*", re.IGNORECASE
)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|my|me|mine|myself)\b|我", re.IGNORECASE)
DUPLICATE_JACCARD = 0.55
EXPLICIT_CONFIDENCE = 0.95


def parse_explicit(text: str) -> str | None:
    """The fact to store when `text` is an explicit memory request, else None.

    Returns "" for a bare prefix (the caller explains the usage).
    """
    match = _PREFIX.match(text)
    if match is None:
        return None
    return " ".join(text[match.end() :].split())


def guess_category(fact: str) -> str:
    """PROFILE for facts about the speaker ("my …", "I …"), KNOWLEDGE otherwise."""
    return "PROFILE" if _FIRST_PERSON.search(fact) else "KNOWLEDGE"
