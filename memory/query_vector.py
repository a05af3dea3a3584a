"""The vector a query is ranked with. A query that names someone ("What does Ann do to
relax?") is embedded twice, as said and without the names, and ranked with the mean of
the two: the names no longer outweigh what is asked about (every line Ann said is alike
in naming her); the names still count through BM25 and the speaker focus of
`memory.second_stage`. Measured on LoCoMo dev (docs/ranking.md): cov@10 up a little on
every conversation, for turns and observation facts; it costs a second query embedding,
so it is off by default (the `name-free-query` step of a `Stage`).

`start_query_vector` embeds on a worker thread (ONNX Runtime releases the GIL while the
model runs), so a ranking does its keyword side meanwhile on the other core; a vector it
made lately (the tool loop ranks the same query on every model call of a turn) is handed
back at once, with no thread.
"""

from __future__ import annotations

import os
import re
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from memory.embeddings import Embedder
from memory.expansion import names_in

_WORD = re.compile(r"[\w'’-]+")
EMBED_WORKERS = 4  # rankings of several chats at once each get a thread (made on demand)

KNOWN_VECTORS = 64  # vectors kept per embedder, the most recently made

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_known: weakref.WeakKeyDictionary[Embedder, OrderedDict[tuple[str, bool], list[float]]] = (
    weakref.WeakKeyDictionary()
)
_known_lock = threading.Lock()


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
    embedder raised. A vector made lately for the same query is a finished future; while the
    interpreter shuts down (no new threads) it runs here."""
    known = _known_vector(embedder, (query, name_free))
    if known is not None:
        ready: Future[list[float]] = Future()
        ready.set_result(known)
        return ready
    try:
        return _executor().submit(_made_and_kept, embedder, query, name_free)
    except RuntimeError:  # "cannot schedule new futures after (interpreter) shutdown"
        done: Future[list[float]] = Future()
        try:
            done.set_result(vector_for(embedder, query, name_free))
        except Exception as exc:  # handed to the caller by `result()`, as inline
            done.set_exception(exc)
        return done


def _made_and_kept(embedder: Embedder, query: str, name_free: bool) -> list[float]:
    vector = vector_for(embedder, query, name_free)
    try:
        with _known_lock:
            kept = _known.setdefault(embedder, OrderedDict())
            kept[(query, name_free)] = vector
            kept.move_to_end((query, name_free))
            while len(kept) > KNOWN_VECTORS:
                kept.popitem(last=False)
    except TypeError:  # an embedder that cannot be weakly referenced or hashed: not kept
        pass
    return list(vector)


def _known_vector(embedder: Embedder, key: tuple[str, bool]) -> list[float] | None:
    try:
        with _known_lock:
            kept = _known.get(embedder)
            found = None if kept is None else kept.get(key)
    except TypeError:
        return None
    return None if found is None else list(found)


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(EMBED_WORKERS, thread_name_prefix="query-vector")
        return _pool


def _forget_pool() -> None:
    """In a forked child: the parent's worker threads do not exist there; make new ones."""
    global _pool, _pool_lock, _known_lock
    _pool, _pool_lock, _known_lock = None, threading.Lock(), threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)
