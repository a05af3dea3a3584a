"""Whether a reflector fact comes from what the people of a chat said: `Grounding`.

A fact's content words (stop words, the speakers' names and the words every fact uses,
such as "user", left out; inflections compared by a light stem) are looked for in the
users' messages of its batch and in the assistant's replies. The fact is grounded when
at least one of them is in the users' messages and no more of them come only from the
assistant's replies than from the users' messages. A small model otherwise stores its own
babble ("El Elenrocha" as KNOWLEDGE) and then repeats it from memory. Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from core.storage.store import StoredMessage
from core.text import strip_think
from memory.terms import STOP_WORDS, token_list

UNGROUNDED = "ungrounded"
# Words a fact uses to speak about people rather than about what they said.
_FACT_TEXT = """user users person people assistant bot someone they he she his her their
    mentioned mentions said says stated states told tells name names named called"""
FACT_WORDS = frozenset(_FACT_TEXT.split())
# Longest first, so "ations" is tried before "s".
_SUFFIXES = ("ations", "ation", "ings", "ing", "ies", "ied", "ers", "er", "ed", "es", "ly", "s")
_MIN_STEM = 3


def stem(word: str) -> str:
    """A light English stem: "lives", "lived", "living" → "liv"; "dogs" → "dog"."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= _MIN_STEM:
            word = word[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
            if suffix in ("ing", "ed", "er") and len(word) > _MIN_STEM and word[-1] == word[-2]:
                word = word[:-1]  # "running" → "run"
            break
    return word[:-1] if len(word) > _MIN_STEM and word.endswith("e") else word


def stems(text: str) -> set[str]:
    return {stem(word) for word in token_list(text)}


@dataclass(frozen=True)
class GroundingVerdict:
    grounded: bool
    from_users: tuple[str, ...]  # the fact's words found in the users' messages
    only_assistant: tuple[str, ...]  # its words found only in the assistant's replies
    nowhere: tuple[str, ...]  # its words found in neither

    @property
    def reason(self) -> str:
        if self.grounded:
            return ""
        if not self.from_users and not self.only_assistant:
            return f"{UNGROUNDED}: no word of it was said in the chat"
        if not self.from_users:
            return f"{UNGROUNDED}: its words come only from the assistant's replies"
        return f"{UNGROUNDED}: more of its words come from the assistant than from the users"


class Grounding:
    """The words of one batch's users and assistant, to check facts against."""

    def __init__(self, messages: Sequence[StoredMessage]) -> None:
        users = [m for m in messages if m.role == "user"]
        replies = [m for m in messages if m.role == "assistant"]
        self.users = _stems_of(strip_think(m.content) for m in users)
        self.assistant = _stems_of(strip_think(m.content) for m in replies)
        self.names = _stems_of(m.sender for m in messages if m.sender)

    def check(self, fact: str) -> GroundingVerdict:
        # A fact that is only about who someone is ("The user's name is Marta") is judged
        # by the names in it, which must then have been said.
        words = self.content_words(fact) or self.names_in(fact)
        from_users = tuple(w for w in words if stem(w) in self.users)
        only_assistant = tuple(
            w for w in words if stem(w) not in self.users and stem(w) in self.assistant
        )
        nowhere = tuple(w for w in words if w not in from_users and w not in only_assistant)
        grounded = bool(from_users) and len(only_assistant) <= len(from_users)
        return GroundingVerdict(grounded, from_users, only_assistant, nowhere)

    def names_in(self, fact: str) -> list[str]:
        """The speakers' names the fact uses."""
        return _names_in(fact, self.names)

    def content_words(self, fact: str) -> list[str]:
        """The fact's distinct words that say something: no stop word, no speaker's name,
        no word that every fact about a person uses."""
        words = dict.fromkeys(token_list(fact))
        return [
            word
            for word in words
            if word not in STOP_WORDS and word not in FACT_WORDS and stem(word) not in self.names
        ]


def _names_in(fact: str, names: set[str]) -> list[str]:
    return [w for w in dict.fromkeys(token_list(fact)) if w not in STOP_WORDS and stem(w) in names]


def _stems_of(texts: Iterable[str]) -> set[str]:
    found: set[str] = set()
    for text in texts:
        found |= stems(text)
    return found
