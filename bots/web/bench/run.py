"""`mnemo bench web`: every dashboard page's server time on a database of a busy bot.

A temporary database gets 100,000 messages and 10,000 memories (with vectors) over 120
chats whose sizes fall off like a real bot's (the busiest has ~18,600 messages and ~1,860
memories), compactions, model usage, reflector runs and tombstones spread over 60 days.
Then each page is requested through the real app in process (ASGI, no network): one
request to warm up, then `--repeat` timed ones. Figures are printed, never asserted; the
target is 200 ms per page.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

BENCH_TOKEN = "bench-token-0123456789abcdef"
TARGET_MS = 200.0
DAYS = 60
TOPICS = ("cat", "garden", "trip to Lisbon", "router", "marathon", "sourdough", "piano", "tax")
PEOPLE = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goro", "Hana", "Ivan", "Jo")


@dataclass(frozen=True)
class PageTime:
    page: str
    first_ms: float
    times_ms: list[float]

    def to_dict(self) -> dict[str, Any]:
        ordered = sorted(self.times_ms)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        return {
            "page": self.page,
            "first_ms": round(self.first_ms, 1),
            "p50_ms": round(statistics.median(ordered), 1),
            "p95_ms": round(p95, 1),
            "max_ms": round(ordered[-1], 1),
            "n": len(ordered),
        }


def chat_sizes(total: int, chats: int) -> list[int]:
    """`total` split over `chats` like Zipf's law (the n-th busiest chat has 1/n the share)."""
    weights = [1 / (n + 1) for n in range(chats)]
    scale = total / sum(weights)
    sizes = [max(int(w * scale), 2) for w in weights]
    sizes[0] += total - sum(sizes)
    return sizes


def moment(rng: random.Random, now: datetime, days: int = DAYS) -> str:
    return (now - timedelta(seconds=rng.uniform(0, days * 86400))).strftime("%Y-%m-%dT%H:%M:%S.%f")[
        :-3
    ] + "Z"


async def run_bench(
    messages: int, memories: int, chats: int, repeat: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    from bots.web.app import build_app
    from core.bench.fakes.fake_openai import FakeOpenAIServer

    with tempfile.TemporaryDirectory(prefix="mnemo-bench-web-") as tmp, FakeOpenAIServer() as fake:
        parts = await _bot(Path(tmp), fake.base_url)
        try:
            started = time.perf_counter()
            seeded = _seed(parts, messages, memories, chats, progress)
            seed_s = time.perf_counter() - started
            progress(f"seeded in {seed_s:.1f} s; timing pages …")
            app = build_app(parts.web.dashboard(), BENCH_TOKEN)
            timings = await _time_pages(app, seeded, repeat)
        finally:
            parts.db.close()
    return {
        "messages": messages,
        "memories": memories,
        "chats": chats,
        "busiest_chat_messages": seeded["busiest_messages"],
        "busiest_chat_memories": seeded["busiest_memories"],
        "seed_s": round(seed_s, 1),
        "target_ms": TARGET_MS,
        "pages": [timing.to_dict() for timing in timings],
        "worst_p95_ms": round(max(t.to_dict()["p95_ms"] for t in timings), 1),
    }


@dataclass
class _Parts:
    db: Any
    sessions: Any
    agent: Any
    web: Any


async def _bot(tmp: Path, base_url: str) -> _Parts:
    """Every plugin's extension on a fresh database, as `mnemo run` builds them."""
    from bots.web.extension import WebExtension
    from core import plugin as default_plugin
    from core.bench.support import bench_config
    from core.model.client import OpenAILLM
    from core.storage.engine import open_storage
    from core.storage.stores import session_store
    from core.turn.assembly import build_agent
    from core.turn.hooks import Host
    from memory import plugin as memory_plugin
    from memory.strategies import plugin as strategies_plugin
    from reflector import plugin as reflector_plugin

    config = bench_config(tmp / "data", base_url)
    storage = open_storage(config.storage)
    sessions = session_store(storage)
    llm = OpenAILLM(config.llm)
    plugins = (default_plugin, memory_plugin, strategies_plugin, reflector_plugin)
    agent = build_agent(config, storage, sessions, llm, plugins)
    host = Host(
        config,
        storage,
        sessions,
        llm,
        agent.extensions,
        agent.compactor,
        agent.planner,
        agent.files,
    )
    await agent.extensions.start()  # the embedding model, as at `mnemo run`
    return _Parts(storage.database, sessions, agent, WebExtension(host))


def _seed(
    parts: _Parts, messages: int, memories: int, chats: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    from bots.web.bench import seed_store
    from core.storage.store import CompactionRecord
    from memory.strategies.strategy_store import DatabaseStrategyStore

    rng, now = random.Random(18), datetime.now(UTC)
    keeper = parts.web.dashboard().keeper
    sizes = chat_sizes(messages, chats)
    memory_sizes = chat_sizes(memories, chats)
    progress(f"seeding {messages:,} messages and {memories:,} memories over {chats} chats …")
    chat_ids = []
    for n, size in enumerate(sizes):
        kind = "group" if n % 5 == 4 else "private"
        chat = parts.sessions.get_or_create_chat("telegram", str(100_000 + n), f"chat {n}", kind)
        chat_ids.append(chat.id)
        person = PEOPLE[n % len(PEOPLE)]
        stamps = sorted(moment(rng, now) for _ in range(size))
        rows = [
            (
                chat.id,
                "user" if i % 2 == 0 else "assistant",
                person if i % 2 == 0 else "",
                f"{person} on the {TOPICS[i % len(TOPICS)]}: note {i} " + "words " * 20,
                stamps[i],
                40,
            )
            for i in range(size)
        ]
        seed_store.load_messages(parts.db, rows)
        _usage(parts.db, chat.id, stamps, rng)
        _history_shape(parts, chat.id, size, stamps, CompactionRecord, rng)
    progress("memories (with vectors) …")
    _memories(keeper, chat_ids, memory_sizes, rng, now)
    strategies = DatabaseStrategyStore(parts.db)
    for chat_id in chat_ids[:20]:
        for i in range(5):
            sid = strategies.add(chat_id, "style", f"Answer plan {i}: short numbered steps")
            strategies.tag(sid, "helpful")
    return {"chat_ids": chat_ids, "busiest_messages": sizes[0], "busiest_memories": memory_sizes[0]}


def _usage(conn: Any, chat_id: int, stamps: list[str], rng: random.Random) -> None:
    from bots.web.bench import seed_store

    rows = []
    for i in range(1, len(stamps), 2):
        kind = "turn" if i % 20 else rng.choice(("compaction", "reflector"))
        model = "qwen2.5:7b" if i % 3 else "llama3.2"
        rows.append(
            (chat_id, kind, model, rng.randint(800, 6000), rng.randint(20, 400), 900, stamps[i])
        )
    seed_store.load_usage(conn, rows)


def _history_shape(
    parts: _Parts, chat_id: int, size: int, stamps: list[str], record: Any, rng: random.Random
) -> None:
    """Compactions every ~400 messages (a session stays inside the window, as a running bot
    keeps it) and a reflector run per 200 messages, some failed or skipped."""
    from bots.web.bench import seed_store

    first = parts.sessions.newest_message_id(chat_id) - size + 1
    runs, done = [], []
    for start in range(0, size - 40, 400):
        end = min(start + 399, size - 41)
        compaction = record(
            "threshold",
            "summarised",
            first + start,
            first + end,
            end - start + 1,
            9000,
            1200,
            1,
            "",
            f"## Goal\nHelp with plans (up to message {first + end}).",
        )
        done.append((stamps[end], parts.sessions.record_compaction(chat_id, compaction)))
    seed_store.backdate(parts.db, "compactions", done)
    for start in range(0, size, 200):
        end = min(start + 199, size - 1)
        status = rng.choices(("done", "failed", "skipped"), (90, 7, 3))[0]
        error = {"done": None, "failed": "model timed out", "skipped": "reply cut at max_tokens"}
        runs.append(
            (
                chat_id,
                stamps[start],
                stamps[end],
                first + start,
                first + end,
                end - start + 1,
                3,
                "qwen2.5:7b",
                int(status == "done"),
                error[status],
                status,
            )
        )
    seed_store.load_runs(parts.db, runs)


def _memories(
    keeper: Any, chat_ids: list[int], sizes: list[int], rng: random.Random, now: datetime
) -> None:
    from bots.web.bench import seed_store

    store = keeper.store
    templates = [f"{p} likes the {t} a lot" for p in PEOPLE for t in TOPICS]
    vectors = store.embedder.embed(templates) if store.vectors_enabled else None
    backdated = []
    with store.transaction():
        for chat_id, size in zip(chat_ids, sizes, strict=True):
            for i in range(size):
                which = rng.randrange(len(templates))
                memory_id = store.add(
                    chat_id,
                    f"{templates[which]} (note {i})",
                    ("PROFILE", "KNOWLEDGE", "EVENT")[i % 3],
                    source=("reflector", "explicit", "tool")[i % 3],
                    confidence=0.8,
                    embedding=vectors[which] if vectors else None,
                )
                backdated.append((moment(rng, now), memory_id))
    seed_store.backdate(store.db, "memories", backdated)
    for chat_id in chat_ids[:10]:
        for memory in store.newest(chat_id, 3):
            store.forget(memory.id, forgotten_by="bench", speaker="")


async def _time_pages(app: Any, seeded: dict[str, Any], repeat: int) -> list[PageTime]:
    import httpx

    busiest, median = seeded["chat_ids"][0], seeded["chat_ids"][len(seeded["chat_ids"]) // 2]
    questions = [f"what did {p} say about the {t}?" for p in PEOPLE for t in TOPICS]
    pages: list[tuple[str, Callable[[int], str]]] = [
        ("chats", lambda n: "/"),
        ("chats search", lambda n: f"/?q=chat {n % 90}"),
        ("conversation (busiest chat)", lambda n: f"/chats/{busiest}"),
        ("conversation (median chat)", lambda n: f"/chats/{median}"),
        ("memories (busiest chat)", lambda n: f"/chats/{busiest}/memories"),
        (
            "recall search (busiest chat)",
            lambda n: f"/chats/{busiest}/memories?q={questions[n % len(questions)]}",
        ),
        ("memory detail", lambda n: f"/chats/{busiest}/memories/{n + 1}"),
        ("AGENTS.md", lambda n: f"/chats/{busiest}/notes"),
        ("strategies", lambda n: f"/chats/{busiest}/strategies"),
        ("reflector (busiest chat)", lambda n: f"/chats/{busiest}/reflector"),
        ("next request (busiest chat)", lambda n: f"/chats/{busiest}/context"),
        ("pictures", lambda n: "/pictures"),
        ("health", lambda n: "/health"),
    ]
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {BENCH_TOKEN}"}
    timings = []
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        for name, path in pages:
            times = []
            for n in range(repeat + 1):
                started = time.perf_counter()
                answer = await client.get(path(n), headers=headers)
                times.append((time.perf_counter() - started) * 1000)
                if answer.status_code != 200:
                    raise click.ClickException(f"{name}: {path(n)} answered {answer.status_code}")
            timings.append(PageTime(name, times[0], times[1:]))
    return timings


@click.command("web")
@click.option("--messages", default=100_000, show_default=True)
@click.option("--memories", default=10_000, show_default=True)
@click.option("--chats", default=120, show_default=True)
@click.option("--repeat", default=10, show_default=True, help="Timed requests per page.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_web(messages: int, memories: int, chats: int, repeat: int, as_json: bool) -> None:
    """Server time of every dashboard page on a seeded database (target: 200 ms)."""
    progress = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    result = asyncio.run(run_bench(messages, memories, chats, max(repeat, 1), progress))
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"{'page':<32} {'first':>8} {'p50':>8} {'p95':>8} {'max':>8}  (ms, n={repeat})")
    for page in result["pages"]:
        click.echo(
            f"{page['page']:<32} {page['first_ms']:>8.1f} {page['p50_ms']:>8.1f}"
            f" {page['p95_ms']:>8.1f} {page['max_ms']:>8.1f}"
        )
    click.echo(f"worst p95 {result['worst_p95_ms']} ms (target <= {TARGET_MS:.0f} ms)")
