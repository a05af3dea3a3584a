"""The vector a query is ranked with. A query that names someone ("What does Ann do to
relax?") is embedded twice, as said and without the names, and ranked with the mean of
the two: the names no longer outweigh what is asked about (every line Ann said is alike
in naming her); the names still count through BM25 and the speaker focus of
`memory.second_stage`. Measured on LoCoMo dev (docs/ranking.md): cov@10 up a little on
every conversation, for turns and observation facts; it costs a second query embedding,
so it is off by default (the `name-free-query` step of a `Stage`).

`start_query_vector` embeds on a worker thread (ONNX Runtime releases the GIL while the
model runs), so a ranking does its keyword side meanwhile on the other core.
"""

from __future__ import annotations

import os
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from memory.embeddings import Embedder
from memory.expansion import names_in

_WORD = re.compile(r"[\w'’-]+")
EMBED_WORKERS = 4  # rankings of several chats at once each get a thread (made on demand)

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


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


def vector_for(embedder: Embedder, query: str, name_free: bool) -> list[float]:
    """The query's vector, by `query_vector` (`name_free`) or its own embedding alone."""
    return query_vector(embedder, query) if name_free else embedder.embed_query(query)


def start_query_vector(embedder: Embedder, query: str, name_free: bool) -> Future[list[float]]:
    """`vector_for` on a worker thread; its `result()` is the vector or raises what the
    embedder raised. While the interpreter shuts down (no new threads) it runs here."""
    try:
        return _executor().submit(vector_for, embedder, query, name_free)
    except RuntimeError:  # "cannot schedule new futures after (interpreter) shutdown"
        done: Future[list[float]] = Future()
        try:
            done.set_result(vector_for(embedder, query, name_free))
        except Exception as exc:  # handed to the caller by `result()`, as inline
            done.set_exception(exc)
        return done


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(EMBED_WORKERS, thread_name_prefix="query-vector")
        return _pool


def _forget_pool() -> None:
    """In a forked child: the parent's worker threads do not exist there; make new ones."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)
