"""Each chat's sentence vectors held in process beside its message vectors, and the
best-sentence re-score of the recall index's ranking (`memory.sentences`).

A message of two or more units (`memory.sentences.extra_units`) has their vectors stored
packed in its recall row (`message_recall.sentence_vectors`, m0026): float16 unit vectors
one after another. `ChatSentences` holds them per message id, loaded with the chat's copy
of the index and extended when new rows come in; a message without any (one sentence, or
indexed before m0026) is compared by its whole text's vector alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class ChatSentences:
    """The sentence vectors of a chat's messages that have them, by message id."""

    width: int = 0
    units: dict[int, Any] = field(default_factory=dict)  # id -> float16 (units, width)

    def __len__(self) -> int:
        return len(self.units)

    def extended(self, packed: Iterable[tuple[int, bytes | None]], width: int) -> ChatSentences:
        """These sentences with the messages' `packed` values added (or replaced); all are
        dropped when the width changed (another embedding model)."""
        kept = dict(self.units) if width == self.width else {}
        size = np.dtype(PACKED).itemsize * width
        good = [(i, value) for i, value in packed if value and size and not len(value) % size]
        if good:  # one buffer for all, a view of it per message: fast to build at 100k
            matrix = np.frombuffer(b"".join(value for _, value in good), dtype=PACKED)
            matrix = matrix.reshape(-1, width)
            ends = np.cumsum([len(value) // size for _, value in good]).tolist()
            for (message_id, _), start, end in zip(good, [0, *ends[:-1]], ends, strict=True):
                kept[message_id] = matrix[start:end]
        return ChatSentences(width, kept)

    def best(self, query: Any, ids: Sequence[int], whole: Mapping[int, float]) -> dict[int, float]:
        """The unit `query`'s cosine with each message's best unit: its whole text (`whole`,
        the message vectors' cosines) or one of its sentences."""
        best = dict(whole)
        held = [message_id for message_id in ids if message_id in self.units]
        if not held:
            return best
        blocks = [self.units[message_id] for message_id in held]
        sims = np.concatenate(blocks).astype(np.float32) @ query
        starts = np.cumsum([0] + [len(block) for block in blocks[:-1]])
        for message_id, top in zip(held, np.maximum.reduceat(sims, starts).tolist(), strict=True):
            best[message_id] = max(best.get(message_id, top), top)
        return best


def rescore_by_sentences(
    ranking: Ranking, query: Sequence[float], vectors: ChatVectors, sentences: ChatSentences
) -> Ranking:
    """`ranking` with its first `SENTENCE_DEPTH` re-ordered by their best sentence's cosine
    with `query` (unchanged when the query's vector is of another size than the chat's)."""
    vector = np.asarray(query, dtype=np.float32)
    if not len(vectors) or len(vector) != vectors.width(vectors.recent):
        return ranking
    vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
    return sentence_rescore(
        ranking, lambda ids: sentences.best(vector, ids, vectors.similarity(vector, ids))
    )
