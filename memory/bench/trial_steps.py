"""`mnemo bench locomo` steps measured on LoCoMo dev and not kept in the product
(docs/notes/locomo-gap.md), on the rankings of `memory.expansion`:

- `session_diverse`: at most a few items of one session in the first places;
- `expansion_terms` + `term_boost`: words that co-occur with the query's in the chat
  raise (and pull in) the items holding them;
- `sentences` + `sentence_rescore`: the query's similarity to an item's best sentence
  re-scores the first 50 (turns up on every conversation, but it needs a vector per
  sentence, which the product does not store).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence

from memory.expansion import Ranking, ordered
from memory.second_stage import leading_speaker
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


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_PHOTO = re.compile(r"\s*\[shares a photo: (.*)\]\s*$")
MIN_SENTENCE_WORDS = 3  # shorter sentences ("Wow!", "Thanks.") say nothing alone
SENTENCE_WEIGHT = 0.25
SENTENCE_DEPTH = 50


def sentences(text: str) -> list[str]:
    """What `sentence_rescore` compares a query with: the whole text (as said, without a
    date in front), then each sentence of at least `MIN_SENTENCE_WORDS` words and a shared
    photo's caption (`… [shares a photo: CAPTION]`), each with the speaker in front."""
    name = leading_speaker(text)
    speaker = f"{name}: " if name else ""
    said = text[len(speaker) :]
    photo = _PHOTO.search(said)
    body = _PHOTO.sub("", said)
    parts = [part for part in _SENTENCE_END.split(body) if len(part.split()) >= MIN_SENTENCE_WORDS]
    units = [text] + [speaker + part for part in parts]
    if photo is not None:
        units.append(f"{speaker.rstrip(': ')} shares a photo: {photo.group(1)}".strip())
    return list(dict.fromkeys(units))


def sentence_rescore(
    ranking: Sequence[tuple[int, float]],
    best_similarity: Callable[[Sequence[int]], Mapping[int, float]],
    *,
    weight: float = SENTENCE_WEIGHT,
    depth: int = SENTENCE_DEPTH,
) -> Ranking:
    """The first `depth` items re-ordered by `(1 - weight)` of their min-max scaled score
    plus `weight` of their min-max scaled `best_similarity` (the query's cosine with the
    item's best sentence); the rest follow in their order at score 0. No item is added."""
    head, tail = list(ranking[:depth]), list(ranking[depth:])
    similar = best_similarity([item for item, _ in head])
    if len(head) < 2 or not similar:
        return list(ranking)
    scores = _scaled(dict(head))
    closeness = _scaled({item: similar.get(item, min(similar.values())) for item, _ in head})
    mixed = {item: (1 - weight) * scores[item] + weight * closeness[item] for item in scores}
    return ordered(mixed) + [(item, 0.0) for item, _ in tail]


def _scaled(values: Mapping[int, float]) -> dict[int, float]:
    """Min-max scaled to 0..1 (all 0 when every value is the same)."""
    low, high = min(values.values()), max(values.values())
    span = high - low
    return {item: (value - low) / span if span > 0 else 0.0 for item, value in values.items()}
