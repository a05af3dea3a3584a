"""`rank_memories`: the one retriever. Modes knn (vectors), bm25, jaccard, hybrid.

Only the chat's own and global memories that are active (not archived, not expired) are
candidates. `hybrid` fuses the KNN and BM25 rankings. When vectors are unavailable (no
sqlite-vec, no model) knn and hybrid fall back to bm25 and say so once.

hybrid: the union of the top KNN and top BM25 candidates, each scored by min-max scaled
cosine similarity and best-scaled BM25, mixed half and half (`score_fusion`); with the
`name-free-query` step a query naming someone is also embedded without the names
(`memory.query_vector`). Similarities
are exact, from the chat's vectors held in memory (`memory.vector_cache`); BM25 scores
and Jaccard overlaps from the chat's in-memory posting lists (`memory.keyword_cache`);
BM25 reads a memory's `context` (text around it that helps find it) at half the weight of
its content.

Then the second stage every ranking shares (`memory.second_stage`, no model call): the
query's named speakers, its temporal intent ("when …", "in May", "last week") and the
neighbours of the best hits re-score the candidates (`stage`, all steps by default).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from core.clock import now_iso
from memory.chat_cache import one_change_read
from memory.embeddings import Embedder
from memory.keyword_cache import bm25_ids, jaccard_ids
from memory.memory_candidates import Candidate, MemoryCandidates
from memory.query_vector import start_query_vector
from memory.second_stage import Stage, refine
from memory.store import Memory, MemoryStore
from memory.vector_cache import chat_vectors

logger = logging.getLogger(__name__)

MODES = ("hybrid", "knn", "bm25", "jaccard")
MIN_DEPTH = 50  # candidates each ranker contributes to the fusion
KEYWORD_WEIGHT = 0.5  # hybrid: share of the normalised BM25 score, the rest is cosine

_warned_fallback = False


@dataclass(frozen=True)
class RankedMemory:
    memory: Memory
    score: float


def effective_mode(store: MemoryStore, mode: str) -> str:
    """The mode that will really run: knn/hybrid need a vector index fit for the embedder."""
    if mode not in MODES:
        raise ValueError(f"unknown ranking mode {mode!r}; choose one of {', '.join(MODES)}")
    if mode in ("knn", "hybrid") and store.vectors_unavailable() is not None:
        return "bm25"
    return mode


def _warn_fallback(mode: str, store: MemoryStore) -> None:
    global _warned_fallback
    if _warned_fallback:
        return
    _warned_fallback = True
    reason = store.vectors_unavailable()
    logger.warning("memory ranking mode %s unavailable (%s); using bm25 keywords", mode, reason)


def score_fusion(
    semantic: dict[int, float], keyword: dict[int, float], keyword_weight: float = 0.5
) -> dict[int, float]:
    """Fuse cosine similarities and BM25 scores after normalising each to 0..1.

    Similarities are min-max scaled over the union of candidates (a candidate without a
    vector counts as the minimum); BM25 scores are divided by the best one (no match = 0).
    """
    ids = set(semantic) | set(keyword)
    if not ids:
        return {}
    low = min(semantic.values(), default=0.0)
    span = max(semantic.values(), default=0.0) - low
    best_keyword = max(keyword.values(), default=0.0)
    fused: dict[int, float] = {}
    for item in ids:
        sim = (semantic.get(item, low) - low) / span if span > 0 else 0.0
        kw = keyword.get(item, 0.0) / best_keyword if best_keyword > 0 else 0.0
        fused[item] = keyword_weight * kw + (1.0 - keyword_weight) * sim
    return fused


def knn_ids(
    store: MemoryStore, chat_id: int | None, vector: list[float], depth: int
) -> list[tuple[int, float]]:
    """(id, similarity) by exact cosine KNN over the chat's and global memories."""
    nearest, _ = chat_vectors(store, chat_id).search(vector, depth)
    return nearest


def _hybrid(
    store: MemoryStore,
    chat_id: int | None,
    query: str,
    depth: int,
    embedder: Embedder,
    name_free: bool = True,
    early: dict[int, Candidate] | None = None,
) -> list[tuple[int, float]]:
    """Fused (id, score), best first. `early`: filled with the keyword hits' rows for the
    second stage (read while the query embeds; None: not read)."""
    # The query is embedded on a worker thread while this one scores the keywords, brings
    # the chat's vectors up to date and reads rows (on two cores the embedding hides them).
    pending = start_query_vector(embedder, query, name_free)
    keyword = dict(bm25_ids(store, chat_id, query, depth))
    vectors = chat_vectors(store, chat_id)
    if early is not None and keyword and not pending.done():  # else one read after fusion
        early.update(store.rank_texts(list(keyword)))
    # One exact scoring pass over the chat's vectors: the semantic side is the `depth` most
    # similar memories plus every keyword hit.
    nearest, hits = vectors.search(pending.result(), depth, list(keyword))
    semantic = dict(nearest)
    semantic.update(hits)
    fused = score_fusion(semantic, keyword, KEYWORD_WEIGHT)
    return sorted(fused.items(), key=lambda item: -item[1])


def rank_memories(
    store: MemoryStore,
    chat_id: int | None,
    query: str,
    k: int,
    *,
    mode: str = "hybrid",
    stage: Stage | None = None,
) -> list[RankedMemory]:
    """The `k` best active memories of this chat and global ones for `query`, best first.

    Vectors come from the store's embedder (none: knn and hybrid fall back to bm25). Ties
    break by recency (last seen, then newest id). `stage`: the second-stage steps and the
    day the query is asked on (default: every step, today).
    """
    if k <= 0 or not query.strip():
        return []
    used = effective_mode(store, mode)
    if used != mode:
        _warn_fallback(mode, store)
    depth = max(MIN_DEPTH, k) + 20  # room for expired rows dropped below
    stage = stage if stage is not None else Stage()
    early: dict[int, Candidate] | None = {} if stage.steps else None
    with one_change_read():  # the keyword lists and vectors: one read of the change log
        scored = _first_stage(store, chat_id, query, depth, used, stage, early)
    if stage.steps and scored:
        head, tail = scored[: 2 * depth], scored[2 * depth :]
        # The second stage reads a candidate's chat, text and day; `_finish` reads whole
        # rows for the few that can make the cut.
        candidates = MemoryCandidates.read(store, chat_id, [item for item, _ in head], early or {})
        today = stage.today or date.fromisoformat(now_iso()[:10])
        scored = refine(head, query, candidates, Stage(stage.steps, today)) + tail
    return _finish(store, chat_id, scored, k)


def _first_stage(
    store: MemoryStore,
    chat_id: int | None,
    query: str,
    depth: int,
    mode: str,
    stage: Stage,
    early: dict[int, Candidate] | None = None,
) -> list[tuple[int, float]]:
    """(id, score) of the candidates by the ranking mode alone, best first (`early`: see
    `_hybrid`)."""
    embedder = store.embedder
    if mode == "knn" and embedder is not None:
        return knn_ids(store, chat_id, embedder.embed_query(query), depth)
    if mode == "hybrid" and embedder is not None:
        named = "name-free-query" in stage.steps
        return _hybrid(store, chat_id, query, depth, embedder, named, early)
    if mode == "jaccard":
        return jaccard_ids(store, chat_id, query)
    return bm25_ids(store, chat_id, query, depth)


def _finish(
    store: MemoryStore,
    chat_id: int | None,
    scored: Sequence[tuple[int, float]],
    k: int,
) -> list[RankedMemory]:
    """The best `k` candidates, reading only the rows that can make the cut.

    `scored` is best first. Rows are read in growing prefixes that always end on a score
    change, so recency can break every tie at the cut; expired rows just extend the read.
    """
    ranked: list[RankedMemory] = []
    start, now = 0, now_iso()
    while start < len(scored) and len(ranked) < k:
        end = min(len(scored), start + max(k - len(ranked), 1) + k // 2)
        while end < len(scored) and scored[end][1] == scored[end - 1][1]:
            end += 1
        chunk = scored[start:end]
        memories = store.by_ids([mid for mid, _ in chunk])
        ranked.extend(
            RankedMemory(memories[mid], score)
            for mid, score in chunk
            if mid in memories and _candidate(memories[mid], chat_id, now)
        )
        start = end
    ranked.sort(key=lambda r: (r.score, r.memory.last_seen_at, r.memory.id), reverse=True)
    return ranked[:k]


def _candidate(memory: Memory, chat_id: int | None, now: str) -> bool:
    if memory.archived or memory.chat_id not in (chat_id, None):
        return False
    return memory.expires_at is None or memory.expires_at > now
