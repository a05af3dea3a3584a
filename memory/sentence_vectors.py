"""The sentence vectors of recalled messages, packed, and the best-sentence re-score of
the recall index's ranking (`memory.sentences`).

A message of two or more units (`memory.sentences.extra_units`) has their vectors stored
packed in its recall row (`message_recall.sentence_vectors`, m0026): float16 unit vectors
one after another. They are not held in process: a search reads those of the candidates
it re-scores (at most `SENTENCE_DEPTH`, one statement) and unpacks only them; a message
without any (one sentence, or indexed before m0026 and not filled yet) is compared by its
whole text's vector alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from memory.expansion import Ranking
from memory.sentences import sentence_rescore
from memory.vector_cache import ChatVectors

PACKED = np.float16  # what a stored unit vector is made of


def pack_units(vectors: Sequence[Sequence[float]], counts: Sequence[int]) -> list[bytes]:
    """One packed value per message from the vectors of every message's units, in order
    (`counts[i]` of them for message i; an empty value for a message with none)."""
    matrix = _unit_rows(vectors)
    packed: list[bytes] = []
    start = 0
    for count in counts:
        packed.append(matrix[start : start + count].astype(PACKED).tobytes() if count else b"")
        start += count
    return packed


def _unit_rows(vectors: Sequence[Sequence[float]]) -> Any:
    if not len(vectors):
        return np.zeros((0, 0), np.float32)
    matrix = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)
    return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)


def unpack_units(packed: bytes | None, width: int) -> Any:
    """The unit vectors of a packed value (rows of `width`), or None when there are none or
    they are of another size (made by another model)."""
    size = np.dtype(PACKED).itemsize * width
    if not packed or not width or len(packed) % size:
        return None
    return np.frombuffer(packed, dtype=PACKED).reshape(-1, width)


def best_cosines(
    query: Any, ids: Sequence[int], whole: Mapping[int, float], packed: Mapping[int, bytes | None]
) -> dict[int, float]:
    """The unit `query`'s cosine with each message's best unit: its whole text (`whole`,
    the message vectors' cosines) or one of its sentences (`packed`, as stored; a message
    without any, or with vectors of another size, keeps its whole text's)."""
    best = dict(whole)
    units = [(i, unpack_units(packed.get(i), len(query))) for i in ids]
    held = [(message_id, block) for message_id, block in units if block is not None]
    if not held:
        return best
    blocks = [block for _, block in held]
    sims = np.concatenate(blocks).astype(np.float32) @ query
    starts = np.cumsum([0] + [len(block) for block in blocks[:-1]])
    for (message_id, _), top in zip(held, np.maximum.reduceat(sims, starts).tolist(), strict=True):
        best[message_id] = max(best.get(message_id, top), top)
    return best


def rescore_by_sentences(
    ranking: Ranking,
    query: Sequence[float],
    vectors: ChatVectors,
    read: Callable[[Sequence[int]], Mapping[int, bytes | None]],
) -> Ranking:
    """`ranking` with its first `SENTENCE_DEPTH` re-ordered by their best sentence's cosine
    with `query`, their packed sentence vectors `read` from the store (only theirs);
    unchanged when the query's vector is of another size than the chat's."""
    vector = np.asarray(query, dtype=np.float32)
    if not len(vectors) or len(vector) != vectors.width(vectors.recent):
        return ranking
    vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
    return sentence_rescore(
        ranking, lambda ids: best_cosines(vector, ids, vectors.similarity(vector, ids), read(ids))
    )
