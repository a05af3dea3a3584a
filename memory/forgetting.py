"""Forgetting that sticks: whether a new fact repeats one a person asked to forget.

`/forget`, the delete tool and `mnemo memory forget` leave a tombstone (`Tombstone`). The
reflector does not store a fact that repeats a tombstone of its chat, the memory tool
refuses one, and only an explicit `remember:` stores it again (lifting the tombstone).

Both texts are first read in the third person: "I like jazz", said by Alice, and the
reflector's "Alice likes jazz" both become "the user like(s) jazz". Then a fact repeats a
forgotten one when
- their content words are the same (plurals and verb -s folded), or
- they share at least half their words and the fact adds none of its own (the test the
  reflector's keyword-only dedup applies), or
- the fact carries the forgotten text's distinctive terms, however it is worded: every
  code in it ("ZEBRAQUARTZ", "A113", "482913": one such word says what it is alone), or
  every name in it ("Miso", "Porto") together with more than half of its words, or
- their embeddings are as close as the reflector's near-duplicate test demands
  (cosine distance ≤ 0.15), when the caller has vectors (the reflector's pass, the
  memory tool with the model loaded).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache

from memory.store import Tombstone, Vector
from memory.terms import STOP_WORDS, content_terms, jaccard_sets

MAX_COSINE_DISTANCE = 0.15  # as `MemoryStore.find_near_duplicate`, the reflector's dedup
MIN_JACCARD = 0.5
MIN_SHARED = 0.5  # of the forgotten text's words, beside its names

_WORD = re.compile(r"[^\W_]+")
_CODE = re.compile(r"(?=\w*\d)(?=\w*[^\W\d_])\w{3,}|[A-Z]{5,}|\d{5,}")

_POSSESSIVE = re.compile(r"\b(?:my|mine)\b|我的", re.IGNORECASE)
_SUBJECT = re.compile(r"\b(?:i'm|i am)\b", re.IGNORECASE)
_PERSON = re.compile(r"\b(?:i've|i'd|i'll|myself|me|i)\b|我", re.IGNORECASE)


def third_person(text: str, speaker: str = "") -> str:
    """`text` with the speaker's "I", "my" and name read as "the user"."""
    text = _POSSESSIVE.sub("the user's", text)
    text = _SUBJECT.sub("the user is", text)
    text = _PERSON.sub("the user", text)
    name = speaker.strip()
    if name:
        text = re.sub(rf"\b{re.escape(name)}\b", "the user", text, flags=re.IGNORECASE)
        first = name.split()[0]
        if first != name and len(first) > 1:
            text = re.sub(rf"\b{re.escape(first)}\b", "the user", text, flags=re.IGNORECASE)
    return text


def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


@lru_cache(maxsize=8192)
def fact_terms(text: str, speaker: str = "") -> frozenset[str]:
    """The content words of `text` read in the third person, lightly stemmed (cached: a
    chat's tombstones are compared with every fact of every pass)."""
    return frozenset(_stem(term) for term in content_terms(third_person(text, speaker)))


def repeats_by_words(fact: str, tombstone: Tombstone) -> bool:
    forgotten = fact_terms(tombstone.content, tombstone.speaker)
    new = fact_terms(fact, tombstone.speaker)
    if not new or not forgotten:
        return False
    return new <= forgotten and jaccard_sets(set(new), set(forgotten)) >= MIN_JACCARD


def _distinctive(tombstone: Tombstone) -> tuple[frozenset[str], frozenset[str]]:
    """The forgotten text's distinctive terms, as `fact_terms` spells them: codes (words
    with letters and digits, all-capital words of 5+ letters, numbers of 5+ digits:
    "ZEBRAQUARTZ", "A113", "482913") and names (capitalised words inside a sentence, not
    the speaker's: "Miso", "Porto")."""
    speaker = {part.lower() for part in tombstone.speaker.split()}
    codes: set[str] = set()
    names: set[str] = set()
    for match in _WORD.finditer(tombstone.content):
        word, term = match.group(0), _stem(match.group(0).lower())
        if term in speaker or term in STOP_WORDS:
            continue
        if _CODE.fullmatch(word):
            codes.add(term)
        elif word[0].isupper() and not word.isupper() and not _sentence_start(match):
            names.add(term)
    return frozenset(codes), frozenset(names)


def _sentence_start(match: re.Match[str]) -> bool:
    before = match.string[: match.start()].rstrip(" \t\"'([")
    return not before or before[-1] in ".!?:\n"


def repeats_by_terms(fact: str, tombstone: Tombstone) -> bool:
    """Whether `fact` carries the forgotten text's distinctive terms, however reworded:
    all its codes (a code says what it is alone), or all its names and most of its words."""
    codes, names = _distinctive(tombstone)
    new = fact_terms(fact, tombstone.speaker)
    if codes and codes <= new:
        return True
    forgotten = fact_terms(tombstone.content, tombstone.speaker)
    shared = len(new & forgotten) / len(forgotten) if forgotten else 0.0
    return bool(names) and (codes | names) <= new and shared > MIN_SHARED


def cosine_distance(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return 1.0 - dot / norms if norms else 1.0


def embedded_texts(fact: str, tombstone: Tombstone) -> tuple[str, str]:
    """What to embed to compare `fact` with `tombstone`: both in the third person."""
    return third_person(fact, tombstone.speaker), third_person(tombstone.content, tombstone.speaker)


def texts_to_embed(facts: Sequence[str], tombstones: Sequence[Tombstone]) -> list[str]:
    """Every distinct text `repeated_tombstone` compares by embedding for these facts."""
    texts = [text for fact in facts for t in tombstones for text in embedded_texts(fact, t)]
    return list(dict.fromkeys(texts))


def _close(fact: str, tombstone: Tombstone, vectors: Mapping[str, Vector]) -> bool:
    mine, theirs = embedded_texts(fact, tombstone)
    if mine not in vectors or theirs not in vectors:
        return False
    return cosine_distance(vectors[mine], vectors[theirs]) <= MAX_COSINE_DISTANCE


def repeated_tombstone(
    fact: str, tombstones: Sequence[Tombstone], vectors: Mapping[str, Vector] | None = None
) -> Tombstone | None:
    """The tombstone `fact` repeats, if any; `vectors` (text → embedding, for the texts of
    `texts_to_embed`) adds the embedding test."""
    for tombstone in tombstones:
        if repeats_by_words(fact, tombstone) or repeats_by_terms(fact, tombstone):
            return tombstone
        if vectors and _close(fact, tombstone, vectors):
            return tombstone
    return None
