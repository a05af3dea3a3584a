"""Second-stage ranking: expand and re-score a first ranking's candidates. Pure functions.

A ranking is a list of `(item id, score)` pairs, best first. Each step returns a new one:
- `neighbour_expand`: the turns next to a top hit join at a share of its score;
- `entity_expand`: rare names in the top hits pull in the other items naming them;
- `feedback_rescore`: pseudo-relevance feedback that only re-scores (Rocchio on vectors);
- `focus_boost`: items naming the query's names and rare terms are raised;
- `session_diverse`: at most a few items of one session in the first places;
- `expansion_terms` + `term_boost`: words that co-occur with the query's in the chat
  raise (and pull in) the items holding them.
Only `neighbour_expand` and `names_in` serve the product (`memory.second_stage`); the
others are `mnemo bench locomo` steps that were measured and not kept
(docs/notes/locomo-gap.md).
"""

from __future__ import annotations

import math
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


def session_diverse(
    ranking: Sequence[tuple[int, float]],
    day_of: Callable[[int], object],
    *,
    cap: int = 3,
    top: int = 10,
) -> Ranking:
    """The `top` first places hold at most `cap` items of one day (session) while items of
    other days are left; the items pushed out follow, in their order. Scores are kept but
    the order is the new one (for multi-hop questions whose evidence spans sessions)."""
    head: list[tuple[int, float]] = []
    deferred: list[tuple[int, float]] = []
    per_day: dict[object, int] = {}
    for pair in ranking:
        day = day_of(pair[0])
        if len(head) < top and per_day.get(day, 0) < cap:
            head.append(pair)
            per_day[day] = per_day.get(day, 0) + 1
        else:
            deferred.append(pair)
    if len(head) < top:  # too few days: fill with the best deferred, in order
        head, deferred = head + deferred[: top - len(head)], deferred[top - len(head) :]
        head.sort(key=lambda pair: -pair[1])
    return head + deferred


def expansion_terms(
    query_terms: Sequence[str], index: Mapping[str, Sequence[int]], total: int, *, n: int = 3
) -> list[str]:
    """Words that co-occur with the query's words in the chat's own items more often than
    their frequency explains (lift), at most `n`: "hobbies" may bring "painting" when the
    chat says both together. `index` maps each word to the items holding it; words in
    more than a quarter of the items (query side) or a twentieth (expansion side) say
    too little."""
    asked = set(query_terms)
    weights: dict[str, float] = {}
    for term in asked:
        holding = set(index.get(term, ()))
        if not holding or len(holding) > total // 4:
            continue
        for other, items in index.items():
            if other in asked or other in STOP_WORDS or len(other) < 3:
                continue
            count = len(holding.intersection(items))
            if count >= 2 and len(items) <= total // 20:
                lift = count / len(holding) / (len(items) / total)
                weights[other] = max(weights.get(other, 0.0), math.log(lift) * count)
    return sorted(weights, key=lambda term: (-weights[term], term))[:n]


def term_boost(
    ranking: Sequence[tuple[int, float]],
    index: Mapping[str, Sequence[int]],
    terms: Sequence[str],
    *,
    share: float = 0.3,
) -> Ranking:
    """Items holding the expansion `terms` gain up to `share` of the best score (by the
    share of the terms they hold); items not ranked yet join with that alone."""
    if not terms or not ranking:
        return list(ranking)
    best = max(score for _, score in ranking)
    scores = dict(ranking)
    held: dict[int, int] = {}
    for term in terms:
        for item in index.get(term, ()):
            held[item] = held.get(item, 0) + 1
    for item, count in held.items():
        scores[item] = scores.get(item, 0.0) + share * best * count / len(terms)
    return ordered(scores)
