"""The best sentence of a message: its units, and the re-score of a ranking by them.

A long message that says one relevant thing among several others ranks low by its whole
text: the other sentences drown the one that matters. `sentences` splits a message into
what a query is compared with (the whole text, each sentence of 3+ words, a shared photo's
caption, the speaker in front of each); `sentence_rescore` re-orders the first
`SENTENCE_DEPTH` of a ranking by `(1 - SENTENCE_WEIGHT)` of their min-max scaled score plus
`SENTENCE_WEIGHT` of their min-max scaled best-sentence cosine. Measured on LoCoMo dev
(docs/notes/locomo-gap.md 9b): turns cov@10 0.801 -> 0.816, up on all five conversations
and when each was left out for picking the weight and depth. The recall index of messages
stores the units' vectors when it takes a message in (`memory.recall`) and re-scores its
ranking with them (`memory.recall_index`); `mnemo bench locomo --technique sentences` runs
the same code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from memory.expansion import Ranking, ordered
from memory.second_stage import leading_speaker

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_PHOTO = re.compile(r"\s*\[shares a photo: (.*)\]\s*$")
MIN_SENTENCE_WORDS = 3  # shorter sentences ("Wow!", "Thanks.") say nothing alone
SENTENCE_WEIGHT = 0.25
SENTENCE_DEPTH = 50
MAX_UNITS = 8  # units stored per message beyond its whole text, at most (the first ones)


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


def extra_units(speaker: str, content: str) -> list[str]:
    """The units of a message beyond its whole text, when it has two or more of them (at
    most `MAX_UNITS`); none for a message of one sentence: its whole text's vector is its
    best sentence."""
    units = sentences(f"{speaker}: {content}")[1:]
    return units[:MAX_UNITS] if len(units) >= 2 else []


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
