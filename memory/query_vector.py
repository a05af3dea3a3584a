"""The vector a query is ranked with. A query that names someone ("What does Ann do to
relax?") is embedded twice, as said and without the names, and ranked with the mean of
the two: the names no longer outweigh what is asked about (every line Ann said is alike
in naming her); the names still count through BM25 and the speaker focus of
`memory.second_stage`. Measured on LoCoMo dev (docs/ranking.md): cov@10 up a little on
every conversation, for turns and observation facts; it costs a second query embedding,
so it is off by default (the `name-free-query` step of a `Stage`).
"""

from __future__ import annotations

import re

import numpy as np

from memory.embeddings import Embedder
from memory.expansion import names_in

_WORD = re.compile(r"[\w'’-]+")


def name_free(query: str) -> str:
    """The query's words without the names it mentions ('' when nothing else is left or
    it names nobody)."""
    names = names_in(query)
    if not names:
        return ""
    kept = [word for word in _WORD.findall(query) if word.lower() not in names]
    return " ".join(kept)


def query_vector(embedder: Embedder, query: str) -> list[float]:
    """The query's vector: its own, or the mean of its own and its name-free one's."""
    vector = np.asarray(embedder.embed_query(query), dtype=np.float32)
    rest = name_free(query)
    if rest:
        other = np.asarray(embedder.embed_query(rest), dtype=np.float32)
        vector = _unit(vector) + _unit(other)
    result: list[float] = _unit(vector).tolist()
    return result


def _unit(vector: np.ndarray) -> np.ndarray:
    return vector / max(float(np.linalg.norm(vector)), 1e-12)
