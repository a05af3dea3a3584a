"""Words of a text, as ranking sees them: tokens (CJK as bigrams), content terms, Jaccard,
and the FTS5 query of a text. Pure functions."""

from __future__ import annotations

import re

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(f"([{_CJK}]+)|([^\\W_{_CJK}]+)")
_HAS_CJK = re.compile(f"[{_CJK}]")
_WORD = re.compile(r"[^\W_]+")

# Words too common to say anything about which memory answers a question.
_STOP_TEXT = """a about after again all also am an and any are as at be been before being but by can
    could did do does doing done for from had has have having he her here hers him his how i
    if in into is it its just me might more most my no nor not now of off on once only or
    other our ours out over own she should so some such than that the their theirs them then
    there these they this those through to too up very was we were what when where which
    while who whom why will with would you your yours yourself s t d ll m re ve"""
STOP_WORDS = frozenset(_STOP_TEXT.split())


def tokens(text: str) -> set[str]:
    """Lowercased words; runs of CJK characters become overlapping character bigrams."""
    return set(token_list(text))


def token_list(text: str) -> list[str]:
    """Like `tokens()` but in order and with repeats (what the full-text index stores)."""
    lowered = text.lower()
    if not _HAS_CJK.search(lowered):
        return _WORD.findall(lowered)  # the common case, several times faster
    found: list[str] = []
    for match in _TOKEN.finditer(lowered):
        cjk, word = match.groups()
        if word:
            found.append(word)
        elif len(cjk) == 1:
            found.append(cjk)
        else:
            found.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
    return found


def has_cjk(text: str) -> bool:
    """Whether `text` has a CJK character (tokenised as bigrams, not words)."""
    return _HAS_CJK.search(text) is not None


def jaccard(a: str, b: str) -> float:
    """Token-set overlap |A∩B| / |A∪B| of two texts (0.0 when both are empty)."""
    return jaccard_sets(tokens(a), tokens(b))


def jaccard_sets(a: set[str], b: set[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def content_terms(text: str) -> list[str]:
    """The query's distinct non-stop-word tokens, in order (all tokens if only stop words)."""
    ordered = list(dict.fromkeys(token_list(text)))
    kept = [term for term in ordered if term not in STOP_WORDS]
    return kept or ordered


def fts_query(text: str, max_terms: int = 32) -> str:
    """An FTS5 MATCH expression: the query's content terms OR-ed, each quoted (no syntax leaks)."""
    terms = content_terms(text)[:max_terms]
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
