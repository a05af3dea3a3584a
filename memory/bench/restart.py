"""`mnemo bench memory`'s restart figures: the first query of a chat in a new process (a
new connection, nothing held in process) without and with a saved ranking snapshot
(`memory.rank_snapshots`) and after the start's warm-up (`memory.warm_up`); the snapshot's
save time and size; the vectors' recall@10 against an exact float32 scan; the process's
memory use."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.storage.engine import Storage

RESTARTS = 3


def rss_mb() -> float:
    """The process's resident memory now (Linux), in MB; 0 where it cannot be read."""
    return status_mb("VmRSS")


def status_mb(field: str) -> float:
    """`field` of /proc/self/status (Linux: VmRSS, VmHWM ...) in MB; 0 where it cannot be read."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith(f"{field}:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def _first_query(reopen: Callable[[], Storage], embedder: Any, chat_id: int, warm: bool,
                 query: str) -> tuple[float, float]:  # fmt: skip
    """(warm-up ms, first query ms) on a fresh connection."""
    from memory.retrieval import rank_memories
    from memory.stores import memory_store
    from memory.vector_cache import chat_vectors, vectors_loaded
    from memory.warm_up import warm_memories

    storage = reopen()
    try:
        store = memory_store(storage, embedder)
        began = time.perf_counter()
        if warm:
            asyncio.run(warm_memories(store, chat_id))
        warmed = time.perf_counter()
        rank_memories(store, chat_id, query, 10)
        done = time.perf_counter()
        if store.embedder is not None and store.vectors_unavailable() is None:
            # PostgreSQL reads the vectors' float16 block after the first query: let it
            # arrive here, not during the next start's first query.
            vectors_loaded(chat_vectors(store, chat_id))
    finally:
        storage.close()
    return (warmed - began) * 1000, (done - warmed) * 1000


def restart_figures(
    reopen: Callable[[], Storage], embedder: Any, chat_id: int, queries: list[str], store: Any
) -> dict[str, dict[str, float]]:
    """First query after a start over RESTARTS new connections: with no snapshot saved,
    with one (cold), and warmed up; and the time to save the snapshot."""
    from memory.rank_snapshots import checkpoint

    asked = queries[:RESTARTS]
    store.drop_rank_snapshots(None, every_chat=True)
    unsaved = [_first_query(reopen, embedder, chat_id, False, q)[1] for q in asked]
    began = time.perf_counter()
    checkpoint(store, chat_id, 0)
    saved_ms = (time.perf_counter() - began) * 1000
    cold = [_first_query(reopen, embedder, chat_id, False, q)[1] for q in asked]
    warmed = [_first_query(reopen, embedder, chat_id, True, q) for q in asked]
    return {
        "(first query after a start, nothing saved)": _spread(unsaved),
        "(ranking snapshot saved)": _spread([saved_ms]),
        "(first query after a start, cold)": _spread(cold),
        "(warm-up at start, in the background)": _spread([w for w, _ in warmed]),
        "(first query after a start, warmed up)": _spread([q for _, q in warmed]),
    }


def _spread(timings: list[float]) -> dict[str, float]:
    ordered = sorted(timings)
    return {
        "p50_ms": round(ordered[len(ordered) // 2], 2),
        "p95_ms": round(ordered[-1], 2),
        "max_ms": round(ordered[-1], 2),
    }


def vector_recall(store: Any, embedder: Any, chat_id: int, queries: list[str]) -> dict[str, float]:
    """recall@10 of the held vectors' search (binary codes, then exact re-scoring) against
    an exact float32 scan of every vector of the chat."""
    import numpy as np

    from memory.vector_cache import chat_vectors

    rows = store.vector_rows(chat_id)
    ids = np.asarray([row[0] for row in rows], dtype=np.int64)
    matrix = np.frombuffer(b"".join(row[1] for row in rows), dtype=np.float32)
    matrix = matrix.reshape(len(rows), -1)
    matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    found = total = 0
    for query in queries:
        vector = np.asarray(embedder.embed_query(query), dtype=np.float32)
        exact = set(ids[np.argsort(-(matrix @ vector))[:10]].tolist())
        nearest, _ = chat_vectors(store, chat_id).search(vector.tolist(), 10)
        found += len(exact & {memory_id for memory_id, _ in nearest})
        total += len(exact)
    return {"recall_at_10": round(found / max(total, 1), 4), "queries": len(queries)}
