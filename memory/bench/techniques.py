"""`mnemo bench locomo --technique …`: what a run turns on.

- ingest techniques change what is stored: `date-prefix` (the session's day in front of
  each memory, as dated memories are written; the ranking reads a memory's day from it)
  and `resolve-dates` (relative dates followed by the date they meant);
- product steps are the second stage of the product's own ranking
  (`memory.second_stage.STEPS`), passed to `rank_memories` as its `Stage`;
- experimental steps (`focus`, `feedback`, `entities`, `sessions`, `cooccur`,
  `term-feedback`, `sentences`) re-score the product's ranking in the bench only: measured,
  they did not hold (`sentences`: for turns only, and it needs a vector per sentence), so
  the product does not run them (docs/notes/locomo-gap.md).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from memory import expansion
from memory.bench import trial_steps
from memory.embeddings import Embedder
from memory.second_stage import DEFAULT_STEPS, STEPS
from memory.temporal import date_prefix, resolve_relative_dates

INGEST_TECHNIQUES = ("date-prefix", "resolve-dates")
PRODUCT_STEPS = STEPS
EXPERIMENTAL = (
    "focus",
    "feedback",
    "entities",
    "sessions",
    "cooccur",
    "term-feedback",
    "sentences",
)
TECHNIQUES = INGEST_TECHNIQUES + PRODUCT_STEPS + EXPERIMENTAL
_WORD = re.compile(r"[\w'’-]+")


def ranked_text(content: str, day: date | None, techniques: Collection[str]) -> str:
    """A memory's stored text under the ingest techniques (dates resolved, then prefixed)."""
    if "resolve-dates" in techniques:
        content = resolve_relative_dates(content, day)
    if "date-prefix" in techniques:
        content = date_prefix(content, day)
    return content


@dataclass
class Candidates:
    """What the experimental steps know of one conversation's items, by memory id."""

    texts: dict[int, str] = field(default_factory=dict)  # as said, without added dates
    vectors: dict[int, Any] = field(default_factory=dict)
    sentence_vectors: dict[int, Any] = field(default_factory=dict)  # `sentences` step only
    words: dict[str, list[int]] = field(default_factory=dict)
    days: dict[int, date | None] = field(default_factory=dict)
    today: date | None = None  # the conversation's last day: when its questions are asked

    def add(self, item: int, text: str, day: date | None, vector: Sequence[float] | None) -> None:
        self.texts[item] = text
        self.days[item] = day
        if vector is not None:
            import numpy

            self.vectors[item] = numpy.asarray(vector, dtype=numpy.float32)
        for word in {w.lower() for w in _WORD.findall(text)}:
            self.words.setdefault(word, []).append(item)
        if day is not None and (self.today is None or day > self.today):
            self.today = day

    def similarity_to(self, top: Sequence[int], ids: Sequence[int]) -> dict[int, float]:
        import numpy

        seeds = [self.vectors[i] for i in top if i in self.vectors]
        if not seeds:
            return {}
        centroid = numpy.mean(seeds, axis=0)
        return {i: float(self.vectors[i] @ centroid) for i in ids if i in self.vectors}

    def embed_sentences(self, embedder: Embedder) -> None:
        """Embed every item's `trial_steps.sentences` (unit rows), for the `sentences` step."""
        import numpy

        units = {item: trial_steps.sentences(text) for item, text in self.texts.items()}
        texts = [unit for found in units.values() for unit in found]
        rows = numpy.asarray(embedder.embed(texts), dtype=numpy.float32).reshape(len(texts), -1)
        rows /= numpy.maximum(numpy.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
        start = 0
        for item, found in units.items():
            self.sentence_vectors[item] = rows[start : start + len(found)]
            start += len(found)

    def best_sentence(self, query: Sequence[float], ids: Sequence[int]) -> dict[int, float]:
        """The query's cosine with each item's closest sentence (items without any: left out)."""
        import numpy

        vector = numpy.asarray(query, dtype=numpy.float32)
        vector /= max(float(numpy.linalg.norm(vector)), 1e-12)
        known = [i for i in ids if len(self.sentence_vectors.get(i, ())) > 0]
        return {i: float((self.sentence_vectors[i] @ vector).max()) for i in known}


@dataclass(frozen=True)
class Refiner:
    """The experimental steps a run turns on, after the product's ranking."""

    techniques: frozenset[str]
    candidates: Candidates
    embedder: Embedder | None = None  # the `sentences` step embeds the query

    def refine(self, query: str, ranking: expansion.Ranking) -> expansion.Ranking:
        on, known = self.techniques, self.candidates
        if "sentences" in on and self.embedder is not None:
            vector = self.embedder.embed_query(query)
            ranking = trial_steps.sentence_rescore(
                ranking, lambda ids: known.best_sentence(vector, ids)
            )
        if "focus" in on:
            ranking = expansion.focus_boost(ranking, known.texts, query)
        if "feedback" in on:
            ranking = expansion.feedback_rescore(ranking, known.similarity_to)
        if "entities" in on:
            ranking = expansion.entity_expand(
                ranking, known.texts, lambda name: known.words.get(name, []), query
            )
        if "cooccur" in on or "term-feedback" in on:
            ranking = self._expanded(query, ranking)
        if "sessions" in on:
            ranking = trial_steps.session_diverse(ranking, lambda item: known.days.get(item))
        return ranking

    def _expanded(self, query: str, ranking: expansion.Ranking) -> expansion.Ranking:
        known = self.candidates
        asked = [w.lower() for w in _WORD.findall(query)]
        if "cooccur" in self.techniques:
            terms = trial_steps.expansion_terms(asked, known.words, len(known.texts))
        else:
            terms = _feedback_terms(known, [item for item, _ in ranking[:3]], set(asked))
        return trial_steps.term_boost(ranking, known.words, terms, share=TERM_SHARE)


TERM_SHARE = 0.3


def _feedback_terms(known: Candidates, top: list[int], asked: set[str], n: int = 3) -> list[str]:
    """RM3-like: the rarest words (2+ items, not the query's, not stop words) the top hits share."""
    import math

    from memory.terms import STOP_WORDS

    weights: dict[str, float] = {}
    total = len(known.texts)
    for item in top:
        for word in {w.lower() for w in _WORD.findall(known.texts.get(item, ""))}:
            frequency = len(known.words.get(word, []))
            if word in asked or word in STOP_WORDS or len(word) < 3 or frequency < 2:
                continue
            weights[word] = weights.get(word, 0.0) + math.log(total / frequency)
    return sorted(weights, key=lambda word: -weights[word])[:n]


# The product's defaults (measured on LoCoMo dev, turns and observation facts, each
# conversation; docs/ranking.md). focus, resolve-dates, feedback and entities did not hold;
# name-free-query did, at the price of a second query embedding (off by default).
DEFAULT = frozenset({"date-prefix", *DEFAULT_STEPS})
