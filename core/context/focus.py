"""Request focus (AceClaw): the newest message's names, paths and plan words raise the
priority of the dynamic sections that mention them, by up to `MAX_BOOST` points, before
the budget cuts.

Only the dynamic part is touched, and only the priorities: the sections keep their order
and the static prefix is never looked at, so a server's KV cache of the prefix is kept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from core.api import ContextSection

MAX_BOOST = 12
FOCUS_CHARS = 2_000  # of the newest message (its end: where a long paste's question is)
NAME_POINTS = 6  # a name or a path the message gives
WORD_POINTS = 4  # a plan word (deploy, invoice, migrate, …)
_PATH = re.compile(r"(?<![\w./-])(?:[\w.-]++/)++[\w.-]+|(?<![\w-])[\w-]+\.[a-z]{1,5}\b")
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w-]{2,}")
_WORD = re.compile(r"[a-z][a-z0-9-]{4,}")
STOPWORDS = frozenset(
    {
        "about", "above", "after", "again", "against", "also", "another", "because", "before",
        "being", "below", "between", "could", "doing", "during", "every", "first", "found",
        "going", "having", "might", "other", "should", "since", "still", "their", "there", "these",
        "thing", "things", "think", "those", "through", "today", "under", "until", "wanted",
        "where", "which", "while", "would", "yesterday", "please", "thanks", "there's", "what's",
        "let's", "maybe", "really",
    }
)  # fmt: skip


@dataclass(frozen=True)
class FocusTerms:
    """What the newest message is about: names and paths, and plan words."""

    names: frozenset[str]
    words: frozenset[str]

    @property
    def empty(self) -> bool:
        return not self.names and not self.words


def focus_terms(message: str) -> FocusTerms:
    """Names (capitalised words not opening a sentence), paths (`a/b`, `file.ext`) and plan
    words (5+ letters, not a stopword) of `message`, lowercase."""
    paths = {path.lower() for path in _PATH.findall(message)}
    names = {name.lower() for name in _NAME.findall(message)} | paths
    words = {word for word in _WORD.findall(message.lower()) if word not in STOPWORDS}
    return FocusTerms(frozenset(names), frozenset(words - names))


def focus_boost(text: str, terms: FocusTerms) -> tuple[int, list[str]]:
    """(priority points for a section with `text`, at most `MAX_BOOST`; the terms it matched)."""
    lowered = text.lower()
    found = set(re.findall(r"[\w./-]+", lowered))
    names = sorted(name for name in terms.names if name in found or "/" in name and name in lowered)
    words = sorted(word for word in terms.words if any(w.startswith(word) for w in found))
    points = NAME_POINTS * len(names) + WORD_POINTS * len(words)
    return min(MAX_BOOST, points), names + words


def focus_sections(sections: Sequence[ContextSection], message: str) -> list[ContextSection]:
    """`sections` with their priorities raised by the request focus of `message`; each
    boosted one says why in its `reason`."""
    terms = focus_terms(message[-FOCUS_CHARS:])
    if terms.empty:
        return list(sections)
    focused: list[ContextSection] = []
    for section in sections:
        points, matched = focus_boost(section.text, terms)
        if points and not section.protected:
            why = f"focus +{points} ({', '.join(matched[:4])})"
            reason = f"{section.reason}; {why}" if section.reason else why
            section = replace(section, priority=section.priority + points, reason=reason)
        focused.append(section)
    return focused
