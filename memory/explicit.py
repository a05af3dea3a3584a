"""Explicit memory without a model call: `remember: …`, `remember that …`, `memo: …`, `记住：…`."""

from __future__ import annotations

import re

_COLON_PREFIXES = r"remember\s*:|memo\s*:|记住\s*[:：]"  # also what `is_memory_exchange` sees
_PREFIX = re.compile(rf"^\s*(?:{_COLON_PREFIXES}|remember\s+that\b)\s*", re.IGNORECASE)
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


def noted_reply(memory_id: int, updated: bool) -> str:
    """What the chat answers to a stored `remember: …`."""
    return f"Noted. (memory #{memory_id}{', updated' if updated else ''})"


_NOTED = re.compile(r"^Noted\. \(memory #\d+(?:, updated)?\)$")
_COMMAND = re.compile(rf"^\s*(?:{_COLON_PREFIXES})", re.IGNORECASE)


def is_memory_exchange(text: str) -> bool:
    """Whether a chat message is a `remember: …` (the prefixes with a colon: "remember
    that …" is also how people start a sentence) or its `noted_reply`: what it says is a
    memory of its own (the memories section shows it), not something to recall."""
    return _COMMAND.match(text) is not None or _NOTED.match(text.strip()) is not None


def guess_category(fact: str) -> str:
    """PROFILE for facts about the speaker ("my …", "I …"), KNOWLEDGE otherwise."""
    return "PROFILE" if _FIRST_PERSON.search(fact) else "KNOWLEDGE"
