"""`mnemo bench memory`'s restart figures: the first query of a chat in a new process (a
new connection, nothing held in process), cold and after the start's warm-up
(`memory.warm_up`), and the process's memory use."""

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
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def _first_query(reopen: Callable[[], Storage], embedder: Any, chat_id: int, warm: bool,
                 query: str) -> tuple[float, float]:  # fmt: skip
    """(warm-up ms, first query ms) on a fresh connection."""
    from memory.retrieval import rank_memories
    from memory.stores import memory_store
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
    finally:
        storage.close()
    return (warmed - began) * 1000, (done - warmed) * 1000


def restart_figures(
    reopen: Callable[[], Storage], embedder: Any, chat_id: int, queries: list[str]
) -> dict[str, dict[str, float]]:
    """First query after a start, cold and warmed up, over RESTARTS new connections."""
    cold = [_first_query(reopen, embedder, chat_id, False, q)[1] for q in queries[:RESTARTS]]
    warmed = [_first_query(reopen, embedder, chat_id, True, q) for q in queries[:RESTARTS]]
    return {
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
