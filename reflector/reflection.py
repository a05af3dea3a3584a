"""Reflector: one pass = for each chat with unseen messages, extract facts and store them.

Per chat: claim the lease, read up to `batch_messages` messages after the cursor, make
one model call (plus at most one repair call), gate and embed the facts off the event
loop, then store the memories, move the cursor and log the run in ONE transaction.
Any failure writes nothing but a failed run row; the same messages are tried next pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.config import Config
from core.db import Connection, savepoint, transaction
from core.errors import LeaseLost, LLMError, ReplyInvalid
from core.llm import LLM, Completion
from core.store import SessionStore
from core.usage import complete_recorded
from memory.embeddings import Embedder, load_embedder
from memory.store import CATEGORIES, MemoryStore
from reflector.contributors import PassContributor
from reflector.extraction import (
    Candidate,
    ExistingMemory,
    PromptExtra,
    Transcript,
    build_messages,
    decode_reply,
    parse_memories,
    render_transcript,
    repair_messages,
)
from reflector.facts import FactWriter, PreparedFact
from reflector.maintenance import MaintenanceReport, maintain
from reflector.quality import check_fact
from reflector.store import ChatRun, CursorStore, Lease, LeaseStore, RunStore

logger = logging.getLogger(__name__)

USAGE_KIND = "reflector"
NEWEST_KNOWN = 20
RELEVANT_KNOWN = 20


@dataclass
class PassReport:
    runs: list[ChatRun] = field(default_factory=list)
    maintenance: MaintenanceReport | None = None

    @property
    def ok(self) -> bool:
        return all(run.ok or run.status in ("busy", "idle") for run in self.runs)

    def lines(self) -> list[str]:
        lines = [run.summary() for run in self.runs] or ["no chat has new messages"]
        if self.maintenance is not None:
            lines.append(self.maintenance.summary())
        return lines


def _checked(reply: str) -> dict[str, Any]:
    """The decoded reply, once its `memories` list is known to be usable."""
    data = decode_reply(reply)
    parse_memories(data, CATEGORIES)
    return data


EmbedderFactory = Callable[[], Embedder | None]


@dataclass(frozen=True)
class ReflectorStores:
    """Where a reflector reads and writes: the database (for transactions) and its stores."""

    db: Connection
    sessions: SessionStore
    memories: MemoryStore
    cursors: CursorStore
    leases: LeaseStore
    runs: RunStore


class Reflector:
    """Runs reflector passes against one database."""

    def __init__(
        self,
        config: Config,
        stores: ReflectorStores,
        llm: LLM,
        *,
        contributors: Sequence[PassContributor] = (),
        embedder_factory: EmbedderFactory | None = None,
    ) -> None:
        """`embedder_factory` loads the model the first time a fact needs a vector; None
        means `stores.memories` is used as it is (with or without its embedder)."""
        self.config = config
        self.store = stores.sessions
        self.conn = stores.db
        self.llm = llm
        self.cursor = stores.cursors
        self.leases = stores.leases
        self.runs = stores.runs
        self.contributors = list(contributors)
        # Archiving, deleting and listing need no model: passes with nothing to embed
        # never pay the seconds it takes to load one.
        self._plain = stores.memories
        self._factory = embedder_factory
        self._memories = None if embedder_factory else stores.memories

    @property
    def model(self) -> str:
        return self.config.reflector.model or self.llm.model

    async def memory_store(self) -> MemoryStore:
        """The memory store, its embedder loaded in a thread (seconds, once per process)."""
        if self._memories is None:
            assert self._factory is not None
            embedder = await asyncio.to_thread(self._factory)
            memories = self._plain.with_embedder(embedder)
            memories.prepare_vectors()  # creates the vector table before any pass writes
            self._memories = memories
        return self._memories

    async def run_pass(self, chat_ids: Sequence[int] | None = None) -> PassReport:
        """Reflect on every chat with unseen messages (or just `chat_ids`), then upkeep."""
        report = PassReport()
        for chat_id in self.cursor.pending_chats(chat_ids):
            report.runs.append(await self.reflect_chat(chat_id))
        embedding_store = await self.memory_store() if self._plain.has_unembedded() else None
        report.maintenance = maintain(
            self._plain, self.config.reflector.confidence_floor, embedding_store
        )
        return report

    async def reflect_chat(self, chat_id: int) -> ChatRun:
        """One chat's share of a pass; never raises for a failure inside the chat."""
        run = ChatRun(chat_id, model=self.model)
        lease = self.leases.claim(chat_id)
        if lease is None:
            run.status = "busy"
            return run
        try:
            await self._reflect_leased(run, lease)
        except (LLMError, ReplyInvalid, LeaseLost) as exc:
            self._fail(run, str(exc))
        except Exception as exc:  # the chat boundary: one chat's bug must not stop the pass
            logger.exception("reflector crashed on chat %s", chat_id)
            self._fail(run, f"{type(exc).__name__}: {exc}")
        finally:
            self.leases.release(lease)
        return run

    async def _reflect_leased(self, run: ChatRun, lease: Lease) -> None:
        start = self.cursor.position(run.chat_id)
        batch = self.store.messages_between(
            run.chat_id, start, self.config.reflector.batch_messages
        )
        transcript = render_transcript(batch)
        if transcript is None:
            run.status = "idle"
            run.ok = True
            return
        run.first_message_id = transcript.first_id
        run.last_message_id = transcript.last_id
        run.messages_seen = transcript.count
        data: dict[str, Any] = {}
        if transcript.text:
            data = await self._extract(run, transcript)
        candidates, dropped = parse_memories(data, CATEGORIES) if data else ([], 0)
        run.skipped += dropped
        facts = await self._prepare(run, candidates)
        self._commit(run, lease, (start, transcript.last_id), facts, data)

    async def _extract(self, run: ChatRun, transcript: Transcript) -> dict[str, Any]:
        """The model's decoded reply, after at most one repair call; `ReplyInvalid` if none."""
        extras = [
            PromptExtra(c.key, c.instructions(), c.listing(run.chat_id)) for c in self.contributors
        ]
        known = self.known_memories(run.chat_id, transcript.plain)
        request = build_messages(transcript, known, extras)
        completion = await self._complete(run, request)
        try:
            return _checked(completion.content)
        except ReplyInvalid as first:
            logger.info("chat %s: reply unusable (%s); asking once more", run.chat_id, first)
            repair = repair_messages(request, completion.content, str(first))
            completion = await self._complete(run, repair)
            return _checked(completion.content)

    async def _complete(self, run: ChatRun, messages: list[dict[str, Any]]) -> Completion:
        model = self.config.reflector.model or None
        completion = await complete_recorded(
            self.llm, self.store, run.chat_id, USAGE_KIND, messages, model=model
        )
        run.model = completion.model or self.model
        run.prompt_tokens = (run.prompt_tokens or 0) + (completion.prompt_tokens or 0)
        run.completion_tokens = (run.completion_tokens or 0) + (completion.completion_tokens or 0)
        return completion

    async def _prepare(self, run: ChatRun, candidates: list[Candidate]) -> list[PreparedFact]:
        """Gate the candidates, then embed the survivors in a thread."""
        kept: list[Candidate] = []
        for candidate in candidates:
            verdict = check_fact(candidate.content)
            if verdict.accepted:
                kept.append(Candidate(verdict.content, candidate.category, candidate.supersedes_id))
            else:
                run.skipped += 1
                logger.debug("chat %s: fact dropped: %s", run.chat_id, verdict.reason)
        if not kept:
            return []
        memories = await self.memory_store()
        vectors: list[list[float]] | list[None] = [None] * len(kept)
        if memories.vectors_enabled and memories.embedder is not None:
            vectors = await asyncio.to_thread(memories.embedder.embed, [c.content for c in kept])
        return [
            PreparedFact(c.content, c.category, c.supersedes_id, vector)
            for c, vector in zip(kept, vectors, strict=True)
        ]

    def _commit(
        self,
        run: ChatRun,
        lease: Lease,
        span: tuple[int, int],
        facts: list[PreparedFact],
        data: dict[str, Any],
    ) -> None:
        """Memories, cursor, run row and contributions together, or nothing."""
        with transaction(self.conn):
            moved = self.cursor.advance(run.chat_id, *span)
            if not self.leases.holds(lease) or not moved:
                raise LeaseLost("another pass took this chat over; nothing stored")
            tally = FactWriter(self._memories or self._plain).write(run.chat_id, facts)
            run.added, run.updated, run.refreshed = tally.added, tally.updated, tally.refreshed
            run.skipped += tally.skipped
            run.ok = True
            run.status = "done"
            run_id = self.runs.record(run)
            if data:
                self._contribute(run, data, run_id)
        logger.info("reflector: %s", run.summary())

    def _contribute(self, run: ChatRun, data: dict[str, Any], run_id: int) -> None:
        """Each contributor in a savepoint: its failure is logged and costs nothing else."""
        for contributor in self.contributors:
            try:
                with savepoint(self.conn, "reflector_contributor"):
                    note = contributor.apply(run.chat_id, data.get(contributor.key), run_id)
            except Exception:
                logger.exception("reflector contributor %s failed", contributor.key)
                note = f"{contributor.key}: failed (see log)"
            run.notes.append(note)

    def _fail(self, run: ChatRun, error: str) -> None:
        run.ok = False
        run.status = "failed"
        run.error = error[:500]
        run.added = run.updated = run.refreshed = 0
        logger.warning("reflector: %s", run.summary())
        self.runs.record(run)

    def known_memories(self, chat_id: int, text: str) -> list[ExistingMemory]:
        """The chat's memories shown to the model: the most relevant and the newest, capped."""
        newest = self._plain.newest(chat_id, NEWEST_KNOWN)
        relevant = self._plain.matching(chat_id, text, RELEVANT_KNOWN)
        found = {memory.id: memory for memory in [*relevant, *newest]}
        return [ExistingMemory(m.id, m.category, m.content) for _, m in sorted(found.items())]


def sqlite_reflector(
    config: Config,
    db: Connection,
    llm: LLM,
    *,
    memories: MemoryStore | None = None,
    contributors: Sequence[PassContributor] = (),
    clock: Callable[[], float] = time.time,
) -> Reflector:
    """A reflector on one SQLite connection. Without `memories`, the configured embedding
    model is loaded the first time a fact needs a vector."""
    from core.sqlite_store import SqliteSessionStore
    from memory.sqlite_store import SqliteMemoryStore
    from reflector.sqlite_store import SqliteCursorStore, SqliteLeaseStore, SqliteRunStore

    stores = ReflectorStores(
        db,
        SqliteSessionStore(db),
        memories or SqliteMemoryStore(db),
        SqliteCursorStore(db),
        SqliteLeaseStore(db, config.reflector.lease_s, clock),
        SqliteRunStore(db),
    )
    factory = None if memories is not None else _configured_embedder(config)
    return Reflector(config, stores, llm, contributors=contributors, embedder_factory=factory)


def _configured_embedder(config: Config) -> EmbedderFactory:
    return lambda: load_embedder(config.memory.embedding_model, config.memory.query_precision)
