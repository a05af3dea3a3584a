"""`mnemo bench locomo --gap`: where the evidence of LoCoMo questions ranks, and why.

For every question the product's ranking (the kept techniques) is read 100 deep. Reported:
cov@10/20/50/100 by category; for the questions missed at 10, where their missing evidence
sits (11-20, 21-50, 51-100, beyond); what an oracle re-ranker of the top 50 would reach;
cov@10 by how many evidence turns a question needs (all found, at least one); how many
missing evidence turns share no content stem with the question *and* are not among the
100 nearest vectors (out of reach of both first-stage rankers: inference or world knowledge
needed); and the evidence turns that carry an image (`blip_caption`). The dataset (CC
BY-NC 4.0, Maharana et al., ACL 2024) is read in place.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.storage.db import connect
from memory.bench.locomo import (
    CATEGORY_NAMES,
    Question,
    ingest_sample,
    load_samples,
    questions,
    sessions,
)
from memory.bench.techniques import DEFAULT, PRODUCT_STEPS
from memory.embeddings import Embedder
from memory.memory_store import DatabaseMemoryStore
from memory.posting_lists import index_terms, query_terms
from memory.retrieval import rank_memories
from memory.second_stage import Stage

DEPTHS = (10, 20, 50, 100)
BANDS = ((11, 20), (21, 50), (51, 100))
ORACLE_POOL = 50
UNRANKED = 10**9  # the vector rank of a turn when there are no vectors
NEAR_LEVELS = (20, 50, 100)  # "far": outside the query's N nearest vectors in the chat


@dataclass(frozen=True)
class Asked:
    """One question's outcome: evidence ranks (None: beyond 100) and per-turn reachability."""

    sample: str
    category: int
    ranks: dict[str, int | None]  # evidence dia_id -> best position (1-based)
    oracle: float  # cov@10 of an oracle re-ranker of the top ORACLE_POOL
    shares_stem: frozenset[str]  # evidence turns sharing a content stem with the question
    vector_rank: dict[str, int]  # evidence dia_id -> rank of its best item by cosine alone
    images: frozenset[str]  # evidence turns that carry a photo caption
    no_item: frozenset[str]  # evidence turns no memory stands for (observations: no fact)

    def out_of_reach(self, k: int, near: int = 50) -> list[str]:
        """Missing turns sharing no content stem and not among the `near` nearest vectors."""
        return [
            t for t in self.missing(k) if t not in self.shares_stem and self.vector_rank[t] > near
        ]

    def missing(self, k: int) -> list[str]:
        return [t for t, rank in self.ranks.items() if rank is None or rank > k]

    def cov(self, k: int) -> float:
        found = sum(1 for rank in self.ranks.values() if rank is not None and rank <= k)
        return found / len(self.ranks)


@dataclass
class GapReport:
    asked: list[Asked] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        categories = sorted({a.category for a in self.asked})
        groups: dict[str, list[Asked]] = {"all": self.asked}
        groups.update(
            {CATEGORY_NAMES[c]: [a for a in self.asked if a.category == c] for c in categories}
        )
        return {
            "questions": len(self.asked),
            "by_category": {name: _group(items) for name, items in groups.items()},
            "by_evidence_count": _by_count(self.asked),
            "by_conversation": self.by_conversation(),
            "images": _images(self.asked),
        }

    def by_conversation(self) -> dict[str, dict[str, float]]:
        """cov@10, cov@50 and the oracle's cov@10 of each conversation."""
        names = dict.fromkeys(a.sample for a in self.asked)
        result: dict[str, dict[str, float]] = {}
        for name in names:
            items = [a for a in self.asked if a.sample == name]
            result[name] = {
                "cov@10": _mean([a.cov(10) for a in items]),
                "cov@50": _mean([a.cov(50) for a in items]),
                "oracle_top50_cov@10": _mean([a.oracle for a in items]),
            }
        return result


def _mean(values: Sequence[float]) -> float:
    return round(statistics.fmean(values), 4) if values else 0.0


def _group(items: list[Asked]) -> dict[str, Any]:
    """The figures of one group of questions."""
    data: dict[str, Any] = {f"cov@{k}": _mean([a.cov(k) for a in items]) for k in DEPTHS}
    data["oracle_top50_cov@10"] = _mean([a.oracle for a in items])
    data["questions"] = len(items)
    missed = [a for a in items if a.cov(10) < 1.0]
    data["missed_at_10"] = len(missed)
    missing = [r for a in missed for r in a.ranks.values() if r is None or r > 10]
    bands = {
        f"{low}-{high}": sum(1 for r in missing if r and low <= r <= high) for low, high in BANDS
    }
    bands["beyond_100"] = sum(1 for r in missing if r is None)
    bands["no_item_at_all"] = sum(1 for a in missed for t in a.missing(10) if t in a.no_item)
    data["missing_evidence_turns"] = len(missing)
    data["missing_by_rank"] = bands
    data["missed_with_a_turn_out_of_reach"] = sum(1 for a in missed if a.out_of_reach(10))
    data["missing_reach"] = _reach([(a, t) for a in missed for t in a.missing(10)])
    data["found_reach"] = _reach([(a, t) for a in items for t in a.ranks if t not in a.missing(10)])
    return data


def _reach(pairs: list[tuple[Asked, str]]) -> dict[str, int]:
    """Of these evidence turns: how many share no content stem with their question, how
    many are not among its NEAR nearest vectors, and both (out of reach of either ranker)."""
    no_stem = {(id(a), t) for a, t in pairs if t not in a.shares_stem}
    result: dict[str, int] = {"turns": len(pairs), "no_shared_stem": len(no_stem)}
    for near in NEAR_LEVELS:
        far = {(id(a), t) for a, t in pairs if a.vector_rank[t] > near}
        result[f"vector_rank_over_{near}"] = len(far)
        result[f"no_stem_and_vector_rank_over_{near}"] = len(far & no_stem)
    return result


def _by_count(items: list[Asked]) -> dict[str, dict[str, Any]]:
    """cov@10, all evidence in the top 10 and at least one, by evidence turns needed."""
    buckets: dict[str, list[Asked]] = {}
    for a in items:
        size = len(a.ranks)
        buckets.setdefault(str(size) if size < 4 else "4+", []).append(a)
    result: dict[str, dict[str, Any]] = {}
    for name in sorted(buckets):
        group = buckets[name]
        multi = [a for a in group if a.category == 1]
        result[name] = {
            "questions": len(group),
            "cov@10": _mean([a.cov(10) for a in group]),
            "all_in_top10": _mean([1.0 if a.cov(10) == 1.0 else 0.0 for a in group]),
            "one_in_top10": _mean([1.0 if a.cov(10) > 0 else 0.0 for a in group]),
            "multi_hop_questions": len(multi),
            "multi_hop_cov@10": _mean([a.cov(10) for a in multi]),
            "multi_hop_all_in_top10": _mean([1.0 if a.cov(10) == 1.0 else 0.0 for a in multi]),
            "multi_hop_one_in_top10": _mean([1.0 if a.cov(10) > 0 else 0.0 for a in multi]),
        }
    return result


def _images(items: list[Asked]) -> dict[str, Any]:
    """Evidence turns with a photo: how many, and how often they reach the top 10."""
    with_photo = [(a, t) for a in items for t in a.images]
    plain = [(a, t) for a in items for t in a.ranks if t not in a.images]

    def hit(pairs: list[tuple[Asked, str]]) -> float:
        return _mean([1.0 if (r := a.ranks[t]) is not None and r <= 10 else 0.0 for a, t in pairs])

    return {
        "evidence_turns_with_photo": len(with_photo),
        "evidence_turns_total": len(with_photo) + len(plain),
        "photo_turns_in_top10": hit(with_photo),
        "other_turns_in_top10": hit(plain),
    }


def oracle_cov(pool: Sequence[frozenset[str]], evidence: frozenset[str], k: int = 10) -> float:
    """The best cov@k a re-ranker of `pool` (each item's dia_ids) can reach: greedy cover."""
    left, chosen = set(evidence), 0
    candidates = [ids & evidence for ids in pool if ids & evidence]
    while left and chosen < k and candidates:
        best = max(candidates, key=lambda ids: len(ids & left))
        if not best & left:
            break
        left -= best
        chosen += 1
    return 1 - len(left) / len(evidence)


def evidence_ranks(
    ranking: Sequence[frozenset[str]], evidence: frozenset[str]
) -> dict[str, int | None]:
    """The best 1-based position of each evidence turn in `ranking` (None: not in it)."""
    ranks: dict[str, int | None] = dict.fromkeys(evidence)
    for position, ids in enumerate(ranking, start=1):
        for turn in ids & evidence:
            if ranks[turn] is None:
                ranks[turn] = position
    return ranks


@dataclass
class _Conversation:
    """What the gap analysis knows of one ingested conversation."""

    turns_of: dict[int, frozenset[str]]
    stems: dict[str, set[str]]  # dia_id -> stems of its items' text, speakers' names left out
    vectors: dict[int, Any]
    photos: frozenset[str]


def _conversation(
    sample: dict[str, Any], turns_of: dict[int, frozenset[str]], known: Any
) -> _Conversation:
    speakers = {
        term
        for key in ("speaker_a", "speaker_b")
        for term in index_terms(str(sample["conversation"].get(key, "")))
    }
    stems: dict[str, set[str]] = {}
    for item, ids in turns_of.items():
        for turn in ids:
            stems.setdefault(turn, set()).update(set(index_terms(known.texts[item])) - speakers)
    photos = frozenset(
        turn["dia_id"]
        for turns in sessions(sample["conversation"])
        for turn in turns
        if turn.get("blip_caption") or turn.get("img_url")
    )
    return _Conversation(turns_of, stems, known.vectors, photos)


def vector_ranks(conv: _Conversation, query_vector: list[float]) -> dict[str, int]:
    """Each dia_id's best 1-based rank among the chat's items by cosine to the query
    (empty without vectors: every turn then counts as far)."""
    ids = list(conv.vectors)
    if not ids:
        return {}
    matrix = np.stack([conv.vectors[i] for i in ids])
    order = np.argsort(-(matrix @ np.asarray(query_vector, dtype=np.float32)), kind="stable")
    ranks: dict[str, int] = {}
    for position, index in enumerate(order.tolist(), start=1):
        for turn in conv.turns_of[ids[index]]:
            ranks.setdefault(turn, position)
    return ranks


def _ask(
    store: DatabaseMemoryStore,
    chat_id: int,
    question: Question,
    conv: _Conversation,
    stage: Stage,
    embedder: Embedder | None,
    sample: str,
) -> Asked:
    ranked = rank_memories(store, chat_id, question.text, max(DEPTHS), stage=stage)
    ranking = [conv.turns_of.get(r.memory.id, frozenset()) for r in ranked]
    asked = set(query_terms(question.text))
    by_vector = (
        vector_ranks(conv, embedder.embed_query(question.text)) if embedder is not None else {}
    )
    return Asked(
        sample,
        question.category,
        evidence_ranks(ranking, question.evidence),
        oracle_cov(ranking[:ORACLE_POOL], question.evidence),
        frozenset(t for t in question.evidence if conv.stems.get(t, set()) & asked),
        {t: by_vector.get(t, UNRANKED) for t in question.evidence},
        question.evidence & conv.photos,
        question.evidence - set(conv.stems),
    )


def gap_sample(
    sample: dict[str, Any],
    db_path: Path,
    embedder: Embedder | None,
    observations: bool,
    report: GapReport,
) -> None:
    """Ingest one conversation (the kept techniques) and analyse each of its questions."""
    conn = connect(db_path)
    try:
        ingested = ingest_sample(sample, conn, embedder, observations, DEFAULT)
        conv = _conversation(sample, ingested.turns_of, ingested.known)
        stage = Stage(DEFAULT & set(PRODUCT_STEPS), ingested.known.today)
        name = str(sample.get("sample_id", ""))
        store, chat_id = ingested.store, ingested.chat_id
        for question in questions(sample, ingested.turns)[0]:
            report.asked.append(_ask(store, chat_id, question, conv, stage, embedder, name))
    finally:
        conn.close()


def run_gap(path: Path, work_dir: Path, embedder: Embedder | None, observations: bool) -> GapReport:
    """The gap analysis of every conversation of a LoCoMo file."""
    report = GapReport()
    for number, sample in enumerate(load_samples(path)):
        gap_sample(sample, work_dir / f"gap-{number}.db", embedder, observations, report)
    return report
