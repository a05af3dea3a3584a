"""LoCoMo evidence-recall benchmark: ingest a conversation as one chat, rank every question.

The dataset (CC BY-NC 4.0, Maharana et al., ACL 2024) is read from where it lies; nothing
is copied. `cov@k` is the share of a question's evidence turns among the top k memories.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from core.storage.database import SqliteDatabase
from core.storage.db import Connection, connect
from core.storage.session_store import DatabaseSessionStore
from memory.bench.techniques import PRODUCT_STEPS, Candidates, Refiner, ranked_text
from memory.embeddings import Embedder
from memory.memory_store import DatabaseMemoryStore
from memory.retrieval import rank_memories
from memory.second_stage import Stage
from memory.sqlite_index import embedding_text
from memory.store import MemoryStore
from memory.temporal import parse_locomo_datetime

CATEGORY_NAMES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")
CONTEXT_TURNS = 1  # turns before a turn stored as its memory's context (turn memories only)
DEPTH = 50  # candidates ranked per question before the second-stage techniques


@dataclass(frozen=True)
class Item:
    """One memory to ingest: its text, the dialog turns it stands for, the text before it."""

    content: str
    dia_ids: frozenset[str]
    context: str = ""
    day: date | None = None  # the session's date
    session: int = 0


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass
class Result:
    n_questions: int = 0
    n_skipped: int = 0
    coverage: dict[int, list[tuple[int, float]]] = field(default_factory=dict)  # k → [(cat, cov)]
    samples: dict[int, list[str]] = field(default_factory=dict)  # k → sample of each entry
    latencies_ms: list[float] = field(default_factory=list)

    def cov(self, k: int, category: int | None = None, sample: str | None = None) -> float:
        names = self.samples.get(k, [])
        values = [
            c
            for index, (cat, c) in enumerate(self.coverage.get(k, []))
            if category in (None, cat) and sample in (None, names[index])
        ]
        return statistics.fmean(values) if values else 0.0

    def by_sample(self, k: int = 10) -> dict[str, float]:
        """cov@k of each conversation (for leave-one-conversation-out checks)."""
        return {
            name: round(self.cov(k, sample=name), 4)
            for name in dict.fromkeys(self.samples.get(k, []))
        }

    def latency(self, quantile: float) -> float:
        ordered = sorted(self.latencies_ms)
        if not ordered:
            return 0.0
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]

    def summary(self, ks: tuple[int, ...] = (5, 10)) -> dict[str, Any]:
        data: dict[str, Any] = {f"cov@{k}": round(self.cov(k), 4) for k in ks}
        data["latency_ms_p50"] = round(self.latency(0.50), 2)
        data["latency_ms_p95"] = round(self.latency(0.95), 2)
        data["n_questions"] = self.n_questions
        data["n_skipped_no_evidence"] = self.n_skipped
        data["by_category"] = {
            CATEGORY_NAMES.get(cat, str(cat)): {f"cov@{k}": round(self.cov(k, cat), 4) for k in ks}
            for cat in sorted({cat for cat, _ in self.coverage.get(ks[0], [])})
        }
        data["by_conversation"] = {f"cov@{k}": self.by_sample(k) for k in ks}
        return data


def normalise_dia_ids(raw: object) -> set[str]:
    """Every `D<session>:<turn>` in a string or list, numbers normalised (`D30:05` → `D30:5`)."""
    texts = raw if isinstance(raw, list) else [raw]
    return {f"D{int(s)}:{int(t)}" for text in texts for s, t in _DIA_ID.findall(str(text))}


def sessions(conversation: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
    """The session_N turn lists in order (date keys without a session are ignored)."""
    for _, _, turns in dated_sessions(conversation):
        yield turns


def dated_sessions(
    conversation: dict[str, Any],
) -> Iterator[tuple[int, date | None, list[dict[str, Any]]]]:
    """(number, date, turns) of each session, in order."""
    numbers = sorted(
        int(key.split("_")[1])
        for key, value in conversation.items()
        if re.fullmatch(r"session_\d+", key) and isinstance(value, list)
    )
    for number in numbers:
        yield number, session_day(conversation, number), conversation[f"session_{number}"]


def session_day(conversation: dict[str, Any], number: int) -> date | None:
    stamp = parse_locomo_datetime(str(conversation.get(f"session_{number}_date_time", "")))
    return stamp.date() if stamp is not None else None


def turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return text


def turn_items(sample: dict[str, Any]) -> list[Item]:
    """One memory per dialog turn, with the turn before it (same session) as its context."""
    items: list[Item] = []
    for number, day, turns in dated_sessions(sample["conversation"]):
        texts = [turn_text(turn) for turn in turns]
        for index, turn in enumerate(turns):
            context = " ".join(texts[max(0, index - CONTEXT_TURNS) : index])
            items.append(Item(texts[index], frozenset({turn["dia_id"]}), context, day, number))
    return items


def observation_items(sample: dict[str, Any]) -> list[Item]:
    """The dataset's observation facts, each tied to the turn(s) it came from."""
    items: list[Item] = []
    for key in sorted(sample["observation"], key=lambda k: int(re.findall(r"\d+", k)[0])):
        number = int(re.findall(r"\d+", key)[0])
        day = session_day(sample["conversation"], number)
        for facts in sample["observation"][key].values():
            for fact, dia in facts:
                dia_ids = frozenset(normalise_dia_ids(dia))
                items.append(Item(str(fact), dia_ids, "", day, number))
    return items


def questions(sample: dict[str, Any], known: set[str]) -> tuple[list[Question], int]:
    """The sample's questions with evidence limited to existing turns; (questions, skipped)."""
    found: list[Question] = []
    skipped = 0
    for qa in sample["qa"]:
        evidence = set().union(*(normalise_dia_ids(e) for e in qa.get("evidence", []))) & known
        if not evidence:
            skipped += 1
            continue
        found.append(Question(str(qa["question"]), int(qa["category"]), frozenset(evidence)))
    return found, skipped


def load_samples(path: Path) -> list[dict[str, Any]]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of LoCoMo samples")
    return data


def evaluate_sample(
    sample: dict[str, Any],
    db_path: Path,
    *,
    retriever: str,
    embedder: Embedder | None,
    use_observations: bool,
    result: Result,
    ks: tuple[int, ...] = (5, 10),
    techniques: frozenset[str] = frozenset(),
) -> None:
    """Ingest one conversation into a fresh database at `db_path` and rank its questions."""
    conn = connect(db_path)
    try:
        ingested = ingest_sample(sample, conn, embedder, use_observations, techniques)
        store, chat_id, turns_of = ingested.store, ingested.chat_id, ingested.turns_of
        asked, skipped = questions(sample, ingested.turns)
        result.n_skipped += skipped
        refiner = Refiner(techniques, ingested.known, embedder)
        name = str(sample.get("sample_id", ""))
        for question in asked:
            _score(store, chat_id, question, turns_of, retriever, result, ks, refiner, name)
    finally:
        conn.close()


@dataclass(frozen=True)
class IngestedSample:
    """One conversation stored as memories: where, and what the scoring needs of it."""

    store: DatabaseMemoryStore
    chat_id: int
    turns_of: dict[int, frozenset[str]]
    known: Candidates
    turns: set[str]


def ingest_sample(
    sample: dict[str, Any],
    conn: Connection,
    embedder: Embedder | None,
    observations: bool,
    techniques: frozenset[str],
) -> IngestedSample:
    """Store `sample`'s turns (or observations) as the memories of one chat on `conn`."""
    chat = DatabaseSessionStore(SqliteDatabase(conn)).get_or_create_chat(
        "locomo", str(sample["sample_id"])
    )
    store = DatabaseMemoryStore(SqliteDatabase(conn), embedder)
    items = observation_items(sample) if observations else turn_items(sample)
    turns_of, known = _ingest(store, chat.id, items, embedder, techniques)
    turns = {turn["dia_id"] for turns in sessions(sample["conversation"]) for turn in turns}
    return IngestedSample(store, chat.id, turns_of, known, turns)


def _ingest(
    store: MemoryStore,
    chat_id: int,
    items: list[Item],
    embedder: Embedder | None,
    techniques: frozenset[str],
) -> tuple[dict[int, frozenset[str]], Candidates]:
    """Store every item as a memory; (dialog turns of each memory id, second-stage facts)."""
    texts = [ranked_text(item.content, item.day, techniques) for item in items]
    vectors: list[list[float] | None] = (
        list(
            embedder.embed(
                [embedding_text(t, i.context) for t, i in zip(texts, items, strict=True)]
            )
        )
        if embedder is not None and store.vectors_enabled
        else [None] * len(items)
    )
    turns_of: dict[int, frozenset[str]] = {}
    known = Candidates()
    for item, text, vector in zip(items, texts, vectors, strict=True):
        memory_id = store.add(
            chat_id, text, "EVENT", source="locomo", embedding=vector, context=item.context
        )
        turns_of[memory_id] = item.dia_ids
        known.add(memory_id, item.content, item.day, vector)
    if "sentences" in techniques and embedder is not None:
        known.embed_sentences(embedder)
    return turns_of, known


def _score(
    store: MemoryStore,
    chat_id: int,
    question: Question,
    turns_of: dict[int, frozenset[str]],
    retriever: str,
    result: Result,
    ks: tuple[int, ...],
    refiner: Refiner,
    sample: str,
) -> None:
    started = time.perf_counter()
    # The product's ranking, asked on the conversation's last day; a memory's day is the
    # session date in front of it (`date-prefix`), else the day it was stored (today).
    depth = max(DEPTH, *ks)
    stage = Stage(refiner.techniques & set(PRODUCT_STEPS), refiner.candidates.today)
    ranked = rank_memories(store, chat_id, question.text, depth, mode=retriever, stage=stage)
    ranking = refiner.refine(question.text, [(r.memory.id, r.score) for r in ranked])
    result.latencies_ms.append((time.perf_counter() - started) * 1000)
    result.n_questions += 1
    for k in ks:
        found: set[str] = set()
        for item, _ in ranking[:k]:
            found |= turns_of.get(item, frozenset())
        share = len(found & question.evidence) / len(question.evidence)
        result.coverage.setdefault(k, []).append((question.category, share))
        result.samples.setdefault(k, []).append(sample)


def run_locomo(
    path: Path,
    work_dir: Path,
    *,
    retriever: str,
    embedder: Embedder | None,
    use_observations: bool = False,
    on_sample: Callable[[str], None] | None = None,
    techniques: frozenset[str] = frozenset(),
) -> Result:
    """Evaluate every sample of the LoCoMo file at `path`, one database per sample."""
    result = Result()
    for number, sample in enumerate(load_samples(path)):
        evaluate_sample(
            sample,
            work_dir / f"locomo-{number}.db",
            retriever=retriever,
            embedder=embedder,
            use_observations=use_observations,
            result=result,
            techniques=techniques,
        )
        if on_sample is not None:
            on_sample(str(sample.get("sample_id", number)))
    return result
