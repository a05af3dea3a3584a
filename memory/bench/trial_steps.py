"""`mnemo bench locomo` steps measured on LoCoMo dev and not kept in the product
(docs/notes/locomo-gap.md), on the rankings of `memory.expansion`:

- `session_diverse`: at most a few items of one session in the first places;
- `expansion_terms` + `term_boost`: words that co-occur with the query's in the chat
  raise (and pull in) the items holding them.

The `sentences` step (the best sentence re-score) moved into the product:
`memory.sentences`, run by the recall index of messages.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from memory.expansion import Ranking, ordered
from memory.terms import STOP_WORDS


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
