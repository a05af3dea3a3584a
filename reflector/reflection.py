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
from core.db import OperationalError, transaction
from core.errors import LLMError, MnemoError
from core.llm import LLM, Completion
from core.store import SessionStore
from memory.embeddings import load_embedder
from memory.ranking import fts_query
from memory.store import CATEGORIES, MemoryStore
from reflector.contributors import PassContributor
from reflector.cursor import ReflectorCursor
from reflector.extraction import (
    Candidate,
    ExistingMemory,
    PromptExtra,
    ReplyInvalid,
    Transcript,
    build_messages,
    decode_reply,
    parse_memories,
    render_transcript,
    repair_messages,
)
from reflector.facts import FactWriter, PreparedFact
from reflector.lease import ChatLease, Lease
from reflector.maintenance import MaintenanceReport, maintain, needs_embedding
from reflector.quality import check_fact
from reflector.runs import ChatRun, RunLog

logger = logging.getLogger(__name__)

USAGE_KIND = "reflector"
NEWEST_KNOWN = 20
RELEVANT_KNOWN = 20


class LeaseLost(MnemoError):
    """Another pass took the chat over (or moved its cursor) while this one worked."""


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


class Reflector:
    """Runs reflector passes against one database connection."""

    def __init__(
        self,
        config: Config,
        store: SessionStore,
        llm: LLM,
        *,
        clock: Callable[[], float] = time.time,
        memories: MemoryStore | None = None,
        contributors: Sequence[PassContributor] = (),
    ) -> None:
        self.config = config
        self.store = store
        self.conn = store.conn
        self.llm = llm
        self.cursor = ReflectorCursor(self.conn)
        self.leases = ChatLease(self.conn, config.reflector.lease_s, clock)
        self.runs = RunLog(self.conn)
        self.contributors = list(contributors)
        self._memories = memories  # None: built on first use with the configured embedder
        # Archiving, deleting and listing need no model: passes with nothing to embed
        # never pay the seconds it takes to load one.
        self._plain = memories or MemoryStore(self.conn)

    @property
    def model(self) -> str:
        return self.config.reflector.model or self.llm.model

    async def memory_store(self) -> MemoryStore:
        """The memory store, its embedder loaded in a thread (seconds, once per process)."""
        if self._memories is None:
            embedder = await asyncio.to_thread(load_embedder, self.config.memory.embedding_model)
            memories = MemoryStore(self.conn, embedder)
            _ = memories.vectors_enabled  # creates the vector table before any pass writes
            self._memories = memories
        return self._memories

    async def run_pass(self, chat_ids: Sequence[int] | None = None) -> PassReport:
        """Reflect on every chat with unseen messages (or just `chat_ids`), then upkeep."""
        report = PassReport()
        for chat_id in self.cursor.pending_chats(chat_ids):
            report.runs.append(await self.reflect_chat(chat_id))
        embedding_store = await self.memory_store() if needs_embedding(self._plain) else None
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
        try:
            completion = await self.llm.complete(messages, model=model)
        except LLMError:
            self.store.record_usage(run.chat_id, USAGE_KIND, self.model, None, None, 0, ok=False)
            raise
        self.store.record_usage(
            run.chat_id,
            USAGE_KIND,
            completion.model or self.model,
            completion.prompt_tokens,
            completion.completion_tokens,
            completion.latency_ms,
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
            self.conn.execute("SAVEPOINT reflector_contributor")
            try:
                note = contributor.apply(run.chat_id, data.get(contributor.key), run_id)
            except Exception:
                self.conn.execute("ROLLBACK TO reflector_contributor")
                logger.exception("reflector contributor %s failed", contributor.key)
                note = f"{contributor.key}: failed (see log)"
            self.conn.execute("RELEASE reflector_contributor")
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
        newest = self.conn.execute(
            "SELECT id, category, content FROM memories WHERE chat_id = ? AND archived = 0"
            " ORDER BY id DESC LIMIT ?",
            (chat_id, NEWEST_KNOWN),
        ).fetchall()
        relevant: list[Any] = []
        query = fts_query(text)
        if query:
            try:
                relevant = self.conn.execute(
                    "SELECT m.id, m.category, m.content FROM memories_fts f"
                    " JOIN memories m ON m.id = f.rowid WHERE memories_fts MATCH ?"
                    " AND m.chat_id = ? AND m.archived = 0 ORDER BY bm25(memories_fts) LIMIT ?",
                    (f'scope:"c{chat_id}" AND ({query})', chat_id, RELEVANT_KNOWN),
                ).fetchall()
            except OperationalError as exc:  # the index is derived; never fail a pass on it
                logger.warning("reflector: keyword lookup of known memories failed: %s", exc)
        rows = {int(row[0]): row for row in [*relevant, *newest]}
        return [ExistingMemory(row[0], row[1], row[2]) for row in sorted(rows.values())]
