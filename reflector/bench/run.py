"""The reflector benchmark: pass time over N new messages, small history vs large history.

A temporary database, the loopback fake OpenAI server answering at once with two facts,
and the real Reflector, MemoryStore and (optionally) embedder. Both chats get the same
number of existing memories, so only the history length differs.
"""

from __future__ import annotations

import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.config import Config, load_config
from core.errors import MnemoError
from core.model.client import OpenAILLM
from core.storage.database import SqliteDatabase
from core.storage.db import connect
from core.storage.session_store import DatabaseSessionStore
from core.storage.store import NewMessage, SessionStore
from memory.memory_store import DatabaseMemoryStore
from reflector.reflection import Reflector
from reflector.stores import sqlite_reflector

EXISTING_MEMORIES = 100
CHUNK = 10_000


@dataclass(frozen=True)
class BenchResult:
    small: int
    large: int
    new: int
    small_ms: list[float]
    large_ms: list[float]
    embed: bool

    @property
    def ratio(self) -> float:
        return statistics.median(self.large_ms) / statistics.median(self.small_ms)

    def to_dict(self) -> dict[str, Any]:
        return {
            "embeddings": self.embed,
            "new_messages": self.new,
            "small_history": self.small,
            "large_history": self.large,
            "small_median_ms": round(statistics.median(self.small_ms), 1),
            "large_median_ms": round(statistics.median(self.large_ms), 1),
            "small_ms": [round(t, 1) for t in self.small_ms],
            "large_ms": [round(t, 1) for t in self.large_ms],
            "ratio": round(self.ratio, 3),
        }

    def lines(self) -> list[str]:
        def describe(history: int, times: list[float]) -> str:
            return (
                f"history {history:>7,} msgs: pass over {self.new} new messages "
                f"median {statistics.median(times):.1f} ms "
                f"(min {min(times):.1f}, max {max(times):.1f}, n={len(times)})"
            )

        return [
            f"embeddings: {'on' if self.embed else 'off'}",
            describe(self.small, self.small_ms),
            describe(self.large, self.large_ms),
            f"ratio large/small: {self.ratio:.2f} (target <= 1.3)",
        ]


def _fact_responder() -> Callable[[dict[str, Any]], FakeReply]:
    counter = itertools.count(1)

    def respond(request: dict[str, Any]) -> FakeReply:
        n = next(counter)
        facts = [
            {"content": f"Bench user owns {n} green bicycles in total.", "category": "PROFILE"},
            {"content": f"Bench user booked trip number {n} to Lisbon.", "category": "EVENT"},
        ]
        return FakeReply(content=json.dumps({"memories": facts}))

    return respond


def _fill_history(store: SessionStore, chat_id: int, count: int) -> None:
    for start in range(0, count, CHUNK):
        size = min(CHUNK, count - start)
        store.append(
            chat_id,
            [
                NewMessage(
                    "user" if i % 2 == 0 else "assistant",
                    f"history message {start + i}: the weather and some plans",
                    sender="bench",
                )
                for i in range(size)
            ],
        )


def _new_messages(n: int, round_no: int) -> list[NewMessage]:
    return [
        NewMessage("user", f"round {round_no} note {i}: I own green bicycles", sender="bench")
        for i in range(n)
    ]


def _config(data_dir: Path, base_url: str) -> Config:
    config = load_config(None, env={})
    config.storage.data_dir = data_dir
    config.llm.base_url = base_url
    config.llm.max_retries = 0
    return config


async def _seed(reflector: Reflector, history: dict[int, int]) -> None:
    memories = await reflector.memory_store()
    for chat_id, count in history.items():
        _fill_history(reflector.store, chat_id, count)
        for i in range(EXISTING_MEMORIES):
            memories.add(
                chat_id, f"Bench user likes topic number {i} a lot.", "KNOWLEDGE", source="bench"
            )
        reflector.cursor.reset(chat_id, reflector.store.newest_message_id(chat_id))


async def run_bench(
    small: int,
    large: int,
    new: int,
    repeat: int,
    embed: bool,
    progress: Callable[[str], None] = print,
) -> BenchResult:
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer(_fact_responder()) as server:
        config = _config(Path(tmp), server.base_url)
        conn = connect(config.storage.database_path)
        store = DatabaseSessionStore(SqliteDatabase(conn))
        memories = None if embed else DatabaseMemoryStore(SqliteDatabase(conn), None)
        reflector = sqlite_reflector(config, conn, OpenAILLM(config.llm), memories=memories)
        chats = {
            store.get_or_create_chat("bench", name).id: size
            for name, size in (("small", small), ("large", large), ("warmup", 10))
        }
        progress(f"seeding {small + large:,} messages …")
        await _seed(reflector, chats)
        times: dict[int, list[float]] = {chat_id: [] for chat_id in chats}
        for round_no in range(repeat + 1):
            for chat_id in chats:
                store.append(chat_id, _new_messages(new, round_no))
                started = time.perf_counter()
                report = await reflector.run_pass([chat_id])
                elapsed = (time.perf_counter() - started) * 1000
                if not report.ok:
                    raise MnemoError(f"bench pass failed: {'; '.join(report.lines())}")
                if round_no > 0:  # round 0 warms up the model, HTTP client and caches
                    times[chat_id].append(elapsed)
        conn.close()
    small_id, large_id = list(chats)[:2]
    return BenchResult(small, large, new, times[small_id], times[large_id], embed)
