"""`mnemo bench memory`'s memory-use figure of a serving process: a new Python process
that opens the bench's database, loads the query embedder, makes the ranked chat ready
(`memory.warm_up`) and answers some queries, as a bot's process does after a start.

The bench's own process is no measure of that: it generated and inserted every memory,
holds the document vectors' cache and an exact float32 copy of the chat for the recall
check, and Python keeps the freed arenas. Run as `python -m memory.bench.serving_memory
URL CHAT_ID PRECISION QUERY...`; prints one JSON object (MB):

- `start_rss_mb`: after the imports and the embedder, before the chat;
- `rss_mb`: after the chat is ready and the queries are answered;
- `peak_rss_mb`: the most the process held at any moment (`VmHWM`).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

SERVED_QUERIES = 20


def serve(url: str, chat_id: int, precision: str, queries: list[str]) -> dict[str, float]:
    """Open `url`, make chat `chat_id` ready, rank `queries`; the memory use at each step."""
    from core.config import StorageConfig
    from core.storage.engine import open_storage
    from memory.bench.restart import status_mb
    from memory.embeddings import load_embedder
    from memory.retrieval import rank_memories
    from memory.stores import memory_store
    from memory.vector_cache import chat_vectors, vectors_loaded
    from memory.warm_up import warm_memories

    embedder = load_embedder("", precision)
    storage = open_storage(StorageConfig(url=url))
    try:
        start = status_mb("VmRSS")
        store = memory_store(storage, embedder)
        asyncio.run(warm_memories(store, chat_id))
        for query in queries:
            rank_memories(store, chat_id, query, 10)
        if embedder is not None and store.vectors_unavailable() is None:
            vectors_loaded(chat_vectors(store, chat_id))  # PostgreSQL's block read after
        return {
            "start_rss_mb": start,
            "rss_mb": status_mb("VmRSS"),
            "peak_rss_mb": status_mb("VmHWM"),
        }
    finally:
        storage.close()


def serving_memory(url: str, chat_id: int, precision: str, queries: list[str]) -> dict[str, float]:
    """`serve` in a new process (this interpreter, this checkout); its figures, or
    `failed` 1 when it failed (its last error line on stderr)."""
    asked = queries[:SERVED_QUERIES]
    command = [sys.executable, "-m", "memory.bench.serving_memory", url, str(chat_id), precision]
    done = subprocess.run([*command, *asked], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no error output"])[-1]
        print(f"serving process failed ({done.returncode}): {tail}", file=sys.stderr)
        return {"failed": 1.0}
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["queries"] = len(asked)
    return figures


def main(argv: list[str]) -> None:
    url, chat_id, precision, *queries = argv
    print(json.dumps(serve(url, int(chat_id), precision, queries)))


if __name__ == "__main__":
    main(sys.argv[1:])
