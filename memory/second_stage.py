"""The second stage of every ranking: memories (`memory.retrieval.rank_memories`) and
recalled messages (`memory.recall_index.search_ids`) go through the same steps after the
first (fused KNN + BM25) ranking. No model call; written once for both engines.

Steps, in order (`mnemo bench locomo --compare` measures each alone on LoCoMo dev);
`name-free-query` is the first stage's (`memory.query_vector`, off by default), the
others run here:
- `speaker-focus`: an item said by a person the query names (`Ann: …`, a recalled
  message's speaker) scores `1 + SPEAKER_WEIGHT` times more: "what does Ann do to relax"
  is mostly answered by what Ann said (95% of such evidence turns on LoCoMo dev);
- `time-intent`: a query with temporal intent ("when …", "in May", "last week") raises
  the items that name a time, and those said within the span it names;
- `neighbours`: each of the best few items lends a share of its score to the items said
  just before and after it on the same day (the turn that asked, the turn that answered).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Protocol

from memory.expansion import Ranking, apply_factors, names_in, neighbour_expand, ordered
from memory.temporal import time_boosts, time_intent

STEPS = ("name-free-query", "speaker-focus", "time-intent", "neighbours")
# On unless a caller asks otherwise. `name-free-query` is not for memories: it raised LoCoMo
# dev cov@10 a little on every conversation (+0.006 turns, +0.008 observation facts) but
# costs a second query embedding, the larger part of a warm hybrid ranking; recall turns it
# on (`memory.recall_index.STEPS`; docs/notes/ranking-second-stage.md).
DEFAULT_STEPS = frozenset(STEPS) - {"name-free-query"}
SPEAKER_WEIGHT = 0.2
NEIGHBOUR_SEEDS = 5
NEIGHBOUR_SHARE = 0.7
_DAY_PREFIX = re.compile(r"^\[(\d{1,2} [A-Z][a-z]+ \d{4})\]\s*")
_SPEAKER = re.compile(r"^([A-Z][\w'’.-]*(?: [A-Z][\w'’.-]*)?): ")


@dataclass(frozen=True)
class Stage:
    """Which steps run, and the day a query is asked on (relative spans: "last week")."""

    steps: frozenset[str] = DEFAULT_STEPS
    today: date | None = None

    def without(self, *steps: str) -> Stage:
        return Stage(self.steps - set(steps), self.today)


class Candidates(Protocol):
    """What the second stage reads of the ranked items, by id."""

    def text(self, item: int) -> str:
        """The item's words as said, without a date in front."""
        ...

    def day(self, item: int) -> date | None:
        """The day the item was said (or stored)."""
        ...

    def speaker(self, item: int) -> str:
        """Who said it ('' when unknown)."""
        ...

    def neighbours(self, item: int) -> Sequence[int]:
        """The items said just before and after it, the same day."""
        ...


def split_day(text: str) -> tuple[date | None, str]:
    """A leading `[8 May 2023] ` (`memory.temporal.date_prefix`) read off a text."""
    match = _DAY_PREFIX.match(text)
    if match is None:
        return None, text
    try:
        day = datetime.strptime(match.group(1), "%d %B %Y").date()
    except ValueError:
        return None, text
    return day, text[match.end() :]


def leading_speaker(text: str) -> str:
    """`Ann` in `Ann: text` (a message as ranked); '' when the text does not start so."""
    if ": " not in text:  # most stored facts: no regex run (ranking asks for ~140 a query)
        return ""
    match = _SPEAKER.match(split_day(text)[1])
    return match.group(1) if match else ""


def speaker_boost(
    ranking: Sequence[tuple[int, float]],
    candidates: Candidates,
    query: str,
    weight: float = SPEAKER_WEIGHT,
) -> Ranking:
    """Items said by someone the query names score `1 + weight` times more."""
    named = names_in(query)
    if not named:
        return list(ranking)
    factors: dict[int, float] = {}
    for item, _ in ranking:
        speaker = candidates.speaker(item)
        if speaker and not named.isdisjoint(speaker.lower().split()):
            factors[item] = 1.0 + weight
    return apply_factors(ranking, factors) if factors else list(ranking)


def time_rescore(
    ranking: Sequence[tuple[int, float]], candidates: Candidates, query: str, today: date | None
) -> Ranking:
    """`ranking` re-scored by the query's temporal intent (unchanged when it has none)."""
    intent = time_intent(query, today)
    if not intent.any or not ranking:
        return list(ranking)
    texts = {item: candidates.text(item) for item, _ in ranking}
    return apply_factors(ranking, time_boosts(intent, texts, candidates.day))


def refine(
    ranking: Sequence[tuple[int, float]], query: str, candidates: Candidates, stage: Stage
) -> Ranking:
    """The first ranking (best first) after the stage's steps."""
    result = ordered(dict(ranking))
    if "speaker-focus" in stage.steps:
        result = speaker_boost(result, candidates, query)
    if "time-intent" in stage.steps:
        result = time_rescore(result, candidates, query, stage.today)
    if "neighbours" in stage.steps:
        result = neighbour_expand(
            result, candidates.neighbours, seeds=NEIGHBOUR_SEEDS, share=NEIGHBOUR_SHARE
        )
    return result
