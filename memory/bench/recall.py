"""`mnemo bench recall`: does a question's evidence reach the model request, end to end?

Each LoCoMo conversation is replayed as one group chat through the real runtime: its two
speakers talk (stored with their session dates), the bot only listens. Then every question
is asked in that chat, with the fake model and an 8,192-token window, so the chat is
compacted many times. A question counts as answered from memory when all of its evidence
turns are in the request the model gets: in the recalled section, the memories or the
visible history. The dataset (CC BY-NC 4.0, Maharana et al., ACL 2024) is read in place.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from core.api import Extension, Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.bench.support import BENCH_SUMMARY, bench_agent
from core.clock import iso_utc
from core.config import Config
from core.context.summary import is_summary_request
from core.storage.database import SqliteDatabase
from core.storage.db import Connection
from core.storage.engine import sqlite_storage
from core.storage.session_store import DatabaseSessionStore
from core.turn.agent import Agent
from memory.bench.locomo import CATEGORY_NAMES, load_samples, questions, turn_text
from memory.embeddings import Embedder
from memory.temporal import parse_locomo_datetime

WINDOW = 8_192
CHANNEL = "bench"
ASKER = "Reader"
_SECTION = re.compile(r'<(memories|recalled) source="[^"]*">\n(.*?)\n</\1>', re.S)


def squeeze(text: str) -> str:
    return " ".join(text.split())


@dataclass
class RecallTally:
    """What reached the requests: per question, and where each evidence turn was found."""

    asked: list[tuple[str, int, float, bool]] = field(default_factory=list)  # sample, cat, …
    found_in: Counter[str] = field(default_factory=Counter)
    section_tokens: list[float] = field(default_factory=list)
    request_tokens: list[float] = field(default_factory=list)
    skipped: int = 0
    compactions: int = 0

    def share(self, category: int | None = None, whole: bool = True) -> float:
        values = [
            (1.0 if complete else 0.0) if whole else part
            for _, cat, part, complete in self.asked
            if category in (None, cat)
        ]
        return round(statistics.fmean(values), 4) if values else 0.0

    def summary(self) -> dict[str, Any]:
        categories = sorted({cat for _, cat, _, _ in self.asked})
        samples = dict.fromkeys(name for name, _, _, _ in self.asked)
        return {
            "window": WINDOW,
            "questions": len(self.asked),
            "skipped_no_evidence": self.skipped,
            "compactions": self.compactions,
            "evidence_in_request": self.share(),
            "evidence_turns_in_request": self.share(whole=False),
            "by_category": {
                CATEGORY_NAMES.get(cat, str(cat)): {
                    "evidence_in_request": self.share(cat),
                    "evidence_turns_in_request": self.share(cat, whole=False),
                }
                for cat in categories
            },
            "by_conversation": {
                name: round(statistics.fmean(float(c) for n, _, _, c in self.asked if n == name), 4)
                for name in samples
            },
            "evidence_found_in": dict(self.found_in),
            "tokens": {
                "memory_and_recall_mean": _mean(self.section_tokens),
                "memory_and_recall_max": round(max(self.section_tokens, default=0.0), 1),
                "request_mean": _mean(self.request_tokens),
            },
        }


def _mean(values: list[float]) -> float:
    return round(statistics.fmean(values), 1) if values else 0.0


def bench_reply(request: dict[str, Any]) -> FakeReply:
    """A summary when asked for one, else a short acknowledgement."""
    if is_summary_request(request["messages"]):
        return FakeReply(content=BENCH_SUMMARY)
    return FakeReply(content="Noted.")


def memory_extensions(embedder: Embedder | None) -> Callable[[Config, Connection], list[Extension]]:
    """The real memory extension, with its recall, on the bench agent's database."""

    def make(config: Config, conn: Connection) -> list[Extension]:
        from memory.extension import MemoryExtension
        from memory.stores import memory_store, recaller

        storage = sqlite_storage(conn)
        sessions = DatabaseSessionStore(SqliteDatabase(conn))
        extension = MemoryExtension(config, memory_store(storage), lambda: embedder)
        extension.recaller = recaller(storage, config, extension.keeper)
        extension.window_start = lambda chat: sessions.session(chat).started_at_message_id
        return [extension]

    return make


def with_room(agent: Agent) -> None:
    """Give the memory extension the planner's room for dynamic sections, as the plugin does."""
    from memory.extension import MemoryExtension
    from memory.plugin import dynamic_room

    for extension in agent.extensions:
        if isinstance(extension, MemoryExtension):
            extension.section_room = partial(dynamic_room, agent.config, agent.planner)


async def replay(agent: Agent, sample: dict[str, Any]) -> dict[str, str]:
    """Store every turn of the conversation as a listened-to group message, with its
    session's date; return each turn's text by dia_id."""
    conversation = sample["conversation"]
    texts: dict[str, str] = {}
    numbers = sorted(
        int(key.split("_")[1])
        for key, value in conversation.items()
        if re.fullmatch(r"session_\d+", key) and isinstance(value, list)
    )
    for number in numbers:
        stamp = parse_locomo_datetime(str(conversation.get(f"session_{number}_date_time", "")))
        for index, turn in enumerate(conversation[f"session_{number}"]):
            text = turn_text(turn).split(": ", 1)[1]
            sent = iso_utc(stamp + timedelta(seconds=30 * index)) if stamp else ""
            texts[turn["dia_id"]] = text
            await agent.handle(_said(sample, text, turn["speaker"], sent, respond=False))
    return texts


def _said(sample: dict[str, Any], text: str, who: str, sent: str, respond: bool) -> Inbound:
    chat = str(sample.get("sample_id", "chat"))
    return Inbound(
        CHANNEL, chat, text, sender_id=who, sender_name=who, chat_kind="group",
        chat_title=chat, respond=respond, sent_at=sent,
    )  # fmt: skip


def reached(request: dict[str, Any], evidence: list[str]) -> tuple[list[str], float]:
    """Where each evidence text is in the request ('recalled', 'memories', 'history' or
    'missing'), and the memory and recall sections' tokens (4 characters a token)."""
    everything = squeeze("\n".join(str(m.get("content") or "") for m in request["messages"]))
    sections = {key: squeeze(text) for key, text in _SECTION.findall(_raw(request))}
    places: list[str] = []
    for text in evidence:
        probe = squeeze(text)[:150]
        if probe in sections.get("recalled", ""):
            places.append("recalled")
        elif probe in sections.get("memories", ""):
            places.append("memories")
        elif probe in everything:
            places.append("history")
        else:
            places.append("missing")
    return places, sum(len(text) for text in sections.values()) / 4


def _raw(request: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in request["messages"])


def last_chat_request(server: FakeOpenAIServer) -> dict[str, Any]:
    for request in reversed(server.requests):
        if not is_summary_request(request["messages"]):
            found: dict[str, Any] = request
            return found
    raise RuntimeError("the model was never asked")


async def ask_all(
    agent: Agent, server: FakeOpenAIServer, sample: dict[str, Any], tally: RecallTally
) -> None:
    texts = await replay(agent, sample)
    asked, skipped = questions(sample, set(texts))
    tally.skipped += skipped
    name = str(sample.get("sample_id", "?"))
    for question in asked:
        await agent.handle(_said(sample, question.text, ASKER, "", respond=True))
        evidence = sorted(question.evidence)
        request = last_chat_request(server)
        places, tokens = reached(request, [texts[dia] for dia in evidence])
        tally.found_in.update(places)
        present = sum(place != "missing" for place in places)
        tally.asked.append((name, question.category, present / len(places), present == len(places)))
        tally.section_tokens.append(tokens)
        tally.request_tokens.append(len(_raw(request)) / 4)
    tally.compactions += len(agent.store.archive_paths())


async def run_recall_bench(path: Path, limit: int | None = None) -> dict[str, Any]:
    """Replay and question every conversation of the LoCoMo file at `path`."""
    from memory.embeddings import load_embedder

    embedder = load_embedder("", "int8")
    tally = RecallTally()
    started = datetime.now()
    for sample in load_samples(path)[:limit]:
        with (
            FakeOpenAIServer(bench_reply) as server,
            bench_agent(server, WINDOW, memory_extensions(embedder)) as agent,
        ):
            await agent.extensions.start()
            with_room(agent)
            await ask_all(agent, server, sample, tally)
    result = tally.summary()
    result["embedding_model"] = embedder.model_name if embedder is not None else "none (bm25)"
    result["seconds"] = round((datetime.now() - started).total_seconds(), 1)
    return result


def recall_lines(result: dict[str, Any]) -> list[str]:
    tokens = result["tokens"]
    lines = [
        f"{result['questions']} questions, window {result['window']} tokens,"
        f" {result['compactions']} compactions, {result['seconds']} s",
        f"evidence in the request: {result['evidence_in_request']:.3f} of questions"
        f" (evidence turns: {result['evidence_turns_in_request']:.3f})",
        f"memory + recall sections: {tokens['memory_and_recall_mean']} tokens on average,"
        f" {tokens['memory_and_recall_max']} at most",
    ]
    for name, figures in result["by_category"].items():
        lines.append(f"  {name}: {figures['evidence_in_request']:.3f}")
    lines.append(f"found in: {result['evidence_found_in']}")
    return lines
