"""Second-stage ranking: expand and re-score a first ranking's candidates. Pure functions.

A ranking is a list of `(item id, score)` pairs, best first. Each step returns a new one:
- `neighbour_expand`: the turns next to a top hit join at a share of its score;
- `entity_expand`: rare names in the top hits pull in the other items naming them;
- `feedback_rescore`: pseudo-relevance feedback that only re-scores (Rocchio on vectors);
- `focus_boost`: items naming the query's names and rare terms are raised.
Only `neighbour_expand` and `names_in` serve the product (`memory.second_stage`); the
others are `mnemo bench locomo` steps that were measured and not kept, as are those of
`memory.bench.trial_steps` (docs/notes/locomo-gap.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from memory.terms import STOP_WORDS, content_terms

Ranking = list[tuple[int, float]]
_NAME = re.compile(r"\b[A-Z][a-zA-Z'’-]+\b")
_QUESTION_TEXT = """what when where who whom whose which why how did does do is are was were
    would could should has have had can will the a an in on at of for and or but if"""
_QUESTION_WORDS = frozenset(_QUESTION_TEXT.split())


def ordered(scores: Mapping[int, float]) -> Ranking:
    """Best first; ties by id, newest first (stable across runs)."""
    return sorted(scores.items(), key=lambda pair: (-pair[1], -pair[0]))


def neighbour_expand(
    ranking: Sequence[tuple[int, float]],
    neighbours: Callable[[int], Sequence[int]],
    *,
    seeds: int = 5,
    share: float = 0.7,
) -> Ranking:
    """Each of the `seeds` best hits lends its neighbours `share` of its score (if higher)."""
    scores = dict(ranking)
    for item, score in list(ranking)[:seeds]:
        for near in neighbours(item):
            scores[near] = max(scores.get(near, 0.0), share * score)
    return ordered(scores)


def names_in(text: str) -> set[str]:
    """Capitalised words that are not question or stop words, lowercased (`Paris` → paris)."""
    return {
        word.lower()
        for word in _NAME.findall(text)
        if word.lower() not in _QUESTION_WORDS and word.lower() not in STOP_WORDS
    }


def entity_expand(
    ranking: Sequence[tuple[int, float]],
    texts: Mapping[int, str],
    find: Callable[[str], Sequence[int]],
    query: str,
    *,
    seeds: int = 3,
    share: float = 0.5,
    max_hits: int = 8,
) -> Ranking:
    """Names in the `seeds` best hits that the query does not name, and that few items
    mention (at most `max_hits`: not the speakers), pull in those items at `share` of the
    seed's score. `find(name)` lists the items mentioning a name."""
    scores = dict(ranking)
    asked = names_in(query) | set(content_terms(query))
    for item, score in list(ranking)[:seeds]:
        for name in sorted(names_in(texts.get(item, "")) - asked):
            found = find(name)
            if len(found) > max_hits:
                continue
            for other in found:
                scores[other] = max(scores.get(other, 0.0), share * score)
    return ordered(scores)


def feedback_rescore(
    ranking: Sequence[tuple[int, float]],
    similarity_to: Callable[[Sequence[int], Sequence[int]], Mapping[int, float]],
    *,
    top: int = 3,
    weight: float = 0.3,
) -> Ranking:
    """Pseudo-relevance feedback that only re-scores: each candidate's score mixes in
    (`weight`) its min-max scaled similarity to the `top` best hits' centroid, as
    `similarity_to(top ids, candidate ids)` gives it. No candidate is added."""
    if len(ranking) <= top:
        return list(ranking)
    ids = [item for item, _ in ranking]
    similar = similarity_to(ids[:top], ids)
    if not similar:
        return list(ranking)
    low, high = min(similar.values()), max(similar.values())
    span = high - low
    scores = {
        item: (1 - weight) * score
        + weight * ((similar.get(item, low) - low) / span if span > 0 else 0.0)
        for item, score in ranking
    }
    return ordered(scores)


def focus_terms(query: str) -> set[str]:
    """The names the query mentions (capitalised words past question words), lowercased."""
    return names_in(query)


def focus_boost(
    ranking: Sequence[tuple[int, float]],
    texts: Mapping[int, str],
    query: str,
    *,
    weight: float = 0.2,
) -> Ranking:
    """Items naming the query's names score up to `1 + weight` times more (by the share
    of those names they mention)."""
    focus = focus_terms(query)
    if not focus:
        return list(ranking)
    scores: dict[int, float] = {}
    for item, score in ranking:
        words = set(re.findall(r"[\w'’-]+", texts.get(item, "").lower()))
        scores[item] = score * (1 + weight * len(focus & words) / len(focus))
    return ordered(scores)


def apply_factors(ranking: Sequence[tuple[int, float]], factors: Mapping[int, float]) -> Ranking:
    """Multiply scores by per-item factors (missing: 1) and re-order."""
    return ordered({item: score * factors.get(item, 1.0) for item, score in ranking})
