"""Reflector: one pass = for each chat with unseen messages, extract facts and store them.

Per chat, up to `batch_messages` messages after the cursor, in batches that fit the
model's window (`reflector.batching`). Per batch: claim the lease, ask the model
(`reflector.calls`; a batch that overflows, or whose reply is cut or unusable, is halved
and retried), gate the facts (quality, then grounding in the users' own words:
`reflector.grounding`; each refusal counted with its reason) and embed them off the event
loop, then store the memories, move the cursor and log the run in ONE transaction. A
failure writes nothing but a failed run row; the same messages are tried next pass,
smaller. When the messages themselves keep failing
(`[reflector] max_attempts`), the batch is logged as skipped with a warning and the cursor
moves past it: no chat stalls for good, and the messages stay in the chat.

A small model often extracts nothing, even where a person plainly says who they are. With
`[reflector] statements` "auto" (the default) on a window of at most `SMALL_WINDOW` tokens,
or "always", a batch for which the model offered no usable fact, or which would be skipped,
stores what its people said about themselves instead (`reflector.statements`), through the
same gate.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any
from zoneinfo import ZoneInfo

from core.config import Config
from core.errors import ContextOverflow, LeaseLost, LLMError, ReplyInvalid
from core.model.client import LLM
from core.model.profile import window_for
from core.storage.store import SessionStore
from memory.embeddings import Embedder, load_embedder
from memory.forgetting import repeated_tombstone, texts_to_embed
from memory.quality import check_fact
from memory.store import CATEGORIES, MemoryStore
from reflector.batching import Shape
from reflector.calls import ExtractionCalls
from reflector.contributors import PassContributor
from reflector.dates import FactDates
from reflector.extraction import Candidate, ExistingMemory, parse_memories
from reflector.facts import FactWriter, PreparedFact
from reflector.grounding import UNGROUNDED, Grounding
from reflector.maintenance import MaintenanceReport, maintain
from reflector.statements import self_statements
from reflector.store import ChatRun, CursorStore, Lease, LeaseStore, RunStore

logger = logging.getLogger(__name__)

NEWEST_KNOWN = 20
RELEVANT_KNOWN = 20
FORGOTTEN = "forgotten before"
SMALL_WINDOW = 8_192  # tokens: "auto" falls back to people's own statements at or below
STATEMENTS_NOTE = "{count} facts from what people said about themselves (the model offered none)"


def gate_reason(reason: str) -> str:
    """The kind of a quality-gate reason: "too short (5 chars)" → "too short"."""
    return reason.split(" (", 1)[0].split(":", 1)[0]


@dataclass
class PassReport:
    runs: list[ChatRun] = field(default_factory=list)
    maintenance: MaintenanceReport | None = None

    @property
    def ok(self) -> bool:
        return all(run.ok or run.status in ("busy", "idle") for run in self.runs)

    def lines(self) -> list[str]:
        lines = [_line(run) for run in self.runs] or ["no chat has new messages"]
        if self.maintenance is not None:
            lines.append(self.maintenance.summary())
        return lines


def _line(run: ChatRun) -> str:
    return f"WARNING: {run.summary()}" if run.status == "skipped" else run.summary()


EmbedderFactory = Callable[[], Embedder | None]


UnitOfWork = Callable[[], AbstractContextManager[Any]]
ChatZone = Callable[[int], str | None]  # chat id -> the time zone the chat set, if any


@dataclass(frozen=True)
class ReflectorStores:
    """Where a reflector reads and writes, on either engine (`reflector.stores` builds
    them): its stores, one database transaction (`transaction()`, which every store joins)
    and a savepoint inside it (`savepoint()`, rolled back alone on an exception)."""

    transaction: UnitOfWork
    savepoint: UnitOfWork
    sessions: SessionStore
    memories: MemoryStore
    cursors: CursorStore
    leases: LeaseStore
    runs: RunStore
    chat_zone: ChatZone = field(default=lambda chat_id: None)  # a chat's own (/timezone)


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
        self.transaction = stores.transaction
        self.savepoint = stores.savepoint
        self.llm = llm
        self.cursor = stores.cursors
        self.leases = stores.leases
        self.runs = stores.runs
        self.chat_zone = stores.chat_zone
        self.contributors = list(contributors)
        self.calls = ExtractionCalls(config, stores.sessions, llm, self.contributors)
        # Archiving, deleting and listing need no model: passes with nothing to embed
        # never pay the seconds it takes to load one.
        self._plain = stores.memories
        self._factory = embedder_factory
        self._memories = None if embedder_factory else stores.memories

    @property
    def model(self) -> str:
        return self.config.reflector.model or self.llm.model

    def zone_of(self, chat_id: int) -> ZoneInfo:
        """The chat's days: its own time zone (/timezone) where set, else `[memory] timezone`."""
        return ZoneInfo(self.chat_zone(chat_id) or self.config.memory.timezone)

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
        """Reflect on every chat with unseen messages (or just `chat_ids`), then upkeep.

        Chats are claimed one at a time, the first free one in cursor order: a chat
        another worker holds is passed over (`busy`) and never waited for.
        """
        report = PassReport()
        pending = self.cursor.pending_chats(chat_ids)
        while pending:
            lease = self.leases.claim_next(pending)
            taken = pending.index(lease.chat_id) if lease else len(pending)
            report.runs.extend(self._busy(chat_id) for chat_id in pending[:taken])
            if lease is None:
                break
            report.runs.extend(await self.reflect_pending(lease.chat_id, lease))
            pending = pending[taken + 1 :]
        embedding_store = await self.memory_store() if self._plain.has_unembedded() else None
        report.maintenance = maintain(
            self._plain, self.config.reflector.confidence_floor, embedding_store
        )
        return report

    async def reflect_pending(
        self, chat_id: int, lease: Lease | None = None, *, up_to: int = 0
    ) -> list[ChatRun]:
        """Up to `batch_messages` unseen messages of one chat (and on, batch after batch,
        until message `up_to` is read: the flush before a compaction), in as many batches
        as the window needs, under one lease (`lease`, else claimed here; renewed between
        batches, released at the end); stops at a batch that fails (the next pass tries it
        again)."""
        held = lease or self.leases.claim(chat_id)
        if held is None:
            return [self._busy(chat_id)]
        runs: list[ChatRun] = []
        size = self.config.reflector.batch_messages
        left = size
        try:
            while held is not None and (left > 0 or self.cursor.position(chat_id) < up_to):
                run = await self._reflect_batch(held, left if left > 0 else size)
                runs.append(run)
                if run.status not in ("done", "skipped"):
                    break
                left -= run.messages_seen
                if self.cursor.position(chat_id) >= self.store.newest_message_id(chat_id):
                    break
                held = self.leases.renew(held)  # None: taken over after expiry; stop here
        finally:
            if held is not None:
                self.leases.release(held)
        return runs

    async def reflect_chat(self, chat_id: int, limit: int | None = None) -> ChatRun:
        """One batch of the chat's unseen messages (at most `limit`, else `batch_messages`)
        under a lease of its own; never raises for a failure inside the chat."""
        lease = self.leases.claim(chat_id)
        if lease is None:
            return self._busy(chat_id)
        try:
            return await self._reflect_batch(lease, limit or self.config.reflector.batch_messages)
        finally:
            self.leases.release(lease)

    def _busy(self, chat_id: int) -> ChatRun:
        return ChatRun(chat_id, model=self.model, status="busy")

    async def _reflect_batch(self, lease: Lease, limit: int) -> ChatRun:
        """One batch of the leased chat; a failure is logged as a run, never raised."""
        run = ChatRun(lease.chat_id, model=self.model)
        start = self.cursor.position(lease.chat_id)
        try:
            await self._reflect_leased(run, lease, start, limit)
        except (ReplyInvalid, ContextOverflow) as exc:
            if not await self._statements_instead(run, lease, start):
                self._batch_failed(run, lease, start, str(exc))
        except (LLMError, LeaseLost) as exc:
            self._fail(run, str(exc))
        except Exception as exc:  # the chat boundary: one chat's bug must not stop the pass
            logger.exception("reflector crashed on chat %s", lease.chat_id)
            self._fail(run, f"{type(exc).__name__}: {exc}")
        return run

    async def _reflect_leased(self, run: ChatRun, lease: Lease, start: int, limit: int) -> None:
        messages = self.store.messages_between(run.chat_id, start, limit)
        if not messages:
            run.status = "idle"
            run.ok = True
            return
        earlier = self.runs.failed_attempts(run.chat_id, messages[0].id)
        # After a failure at this cursor, start from half the batch that failed.
        shape = Shape(max(1, earlier.last_seen // 2) if earlier.count else len(messages))
        zone = self.zone_of(run.chat_id)
        batch, data = await self.calls.reply_to_fitting(
            run, messages, shape, lambda text: self.known_memories(run.chat_id, text), zone
        )
        if batch.transcript.clipped:
            run.notes.append(f"{batch.transcript.clipped} long messages clipped")
        candidates, dropped = parse_memories(data, CATEGORIES) if data else ([], 0)
        run.skip("invalid item", dropped)
        covered = [m for m in messages if m.id <= batch.transcript.last_id]
        dates = FactDates(covered, zone)
        candidates = [replace(c, content=dates.absolute(c.content)) for c in candidates]
        facts = await self._prepare(run, candidates, Grounding(covered))
        if not facts and self._uses_statements():
            facts = await self._prepare(run, self_statements(covered), Grounding(covered))
            if facts:
                run.notes.append(STATEMENTS_NOTE.format(count=len(facts)))
        self._commit(run, lease, (start, batch.transcript.last_id), facts, data)

    def _uses_statements(self) -> bool:
        mode = self.config.reflector.statements
        if mode == "auto":
            return window_for(self.store, self.config.llm, self.model).tokens <= SMALL_WINDOW
        return mode == "always"

    async def _statements_instead(self, run: ChatRun, lease: Lease, start: int) -> bool:
        """On the batch's last allowed attempt, store its people's own statements and move
        on, instead of skipping it. False when that does not apply or finds nothing."""
        attempt = self.runs.failed_attempts(run.chat_id, run.first_message_id or 0).count + 1
        last = run.last_message_id
        if last is None or attempt < self.config.reflector.max_attempts:
            return False
        if not self._uses_statements():
            return False
        covered = [
            m
            for m in self.store.messages_between(
                run.chat_id, start, self.config.reflector.batch_messages
            )
            if m.id <= last
        ]
        facts = await self._prepare(run, self_statements(covered), Grounding(covered))
        if not facts:
            return False
        run.notes.append(STATEMENTS_NOTE.format(count=len(facts)))
        try:
            self._commit(run, lease, (start, last), facts, {})
        except LeaseLost as exc:
            self._fail(run, str(exc))
        return True

    async def _prepare(
        self, run: ChatRun, candidates: list[Candidate], grounding: Grounding
    ) -> list[PreparedFact]:
        """Gate the candidates (quality, then grounding in the users' own words), then
        embed the survivors in a thread."""
        kept: list[Candidate] = []
        for candidate in candidates:
            verdict = check_fact(candidate.content)
            if not verdict.accepted:
                run.skip(gate_reason(verdict.reason))
                logger.debug("chat %s: fact dropped: %s", run.chat_id, verdict.reason)
                continue
            grounded = grounding.check(verdict.content)
            if not grounded.grounded:
                run.skip(UNGROUNDED)
                logger.info(
                    "chat %s: fact refused, %s: %r", run.chat_id, grounded.reason, verdict.content
                )
                continue
            kept.append(Candidate(verdict.content, candidate.category, candidate.supersedes_id))
        kept = await self._not_forgotten(run, kept)
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

    async def _not_forgotten(self, run: ChatRun, candidates: list[Candidate]) -> list[Candidate]:
        """The candidates that repeat no memory a person forgot in this chat, compared by
        words and, with a model, by embedding (computed in a thread)."""
        tombstones = self._plain.tombstones(run.chat_id)
        if not tombstones or not candidates:
            return candidates
        memories = await self.memory_store()
        vectors: dict[str, list[float]] | None = None
        if memories.embedder is not None:
            texts = texts_to_embed([c.content for c in candidates], tombstones)
            embedded = await asyncio.to_thread(memories.embedder.embed, texts)
            vectors = dict(zip(texts, embedded, strict=True))
        kept = [c for c in candidates if repeated_tombstone(c.content, tombstones, vectors) is None]
        if len(kept) < len(candidates):
            run.skip(FORGOTTEN, len(candidates) - len(kept))
            run.notes.append(f"{len(candidates) - len(kept)} forgotten facts not learned again")
        return kept

    def _commit(
        self,
        run: ChatRun,
        lease: Lease,
        span: tuple[int, int],
        facts: list[PreparedFact],
        data: dict[str, Any],
    ) -> None:
        """Memories, cursor, run row and contributions together, or nothing. The chat's
        write lock comes first: near-duplicates are looked for and facts inserted with no
        other writer of the chat in between, on either engine."""
        with self.transaction():
            self.leases.lock_chat_writes(run.chat_id)
            moved = self.cursor.advance(run.chat_id, *span)
            if not self.leases.holds(lease) or not moved:
                raise LeaseLost("another pass took this chat over; nothing stored")
            tally = FactWriter(self._memories or self._plain).write(run.chat_id, facts)
            run.added, run.updated, run.refreshed = tally.added, tally.updated, tally.refreshed
            run.skip(FORGOTTEN, tally.skipped)
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
                with self.savepoint():
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

    def _batch_failed(self, run: ChatRun, lease: Lease, start: int, error: str) -> None:
        """A failure of the messages themselves: counted, and after `max_attempts` of them
        at this cursor the batch is skipped (run row and cursor move in one transaction)."""
        run.batch_failed = True
        attempt = self.runs.failed_attempts(run.chat_id, run.first_message_id or 0).count + 1
        limit = self.config.reflector.max_attempts
        if attempt < limit or run.last_message_id is None:
            self._fail(run, f"{error} (attempt {attempt} of {limit}; tried smaller next pass)")
            return
        run.ok = False
        run.status = "skipped"
        run.error = (
            f"{error}; skipped after {attempt} failed attempts (the messages stay in the"
            " chat; only the reflector's cursor moved past them)"
        )[:500]
        run.added = run.updated = run.refreshed = 0
        try:
            with self.transaction():
                moved = self.cursor.advance(run.chat_id, start, run.last_message_id)
                if not self.leases.holds(lease) or not moved:
                    raise LeaseLost("another pass took this chat over; nothing skipped")
                self.runs.record(run)
        except LeaseLost as exc:
            run.batch_failed = False
            self._fail(run, str(exc))
            return
        logger.warning("reflector: %s", run.summary())

    def known_memories(self, chat_id: int, text: str) -> list[ExistingMemory]:
        """The chat's memories to show the model, most useful first: the most relevant to
        `text`, then the newest (`reflector.batching` lists those that fit)."""
        newest = self._plain.newest(chat_id, NEWEST_KNOWN)
        relevant = self._plain.matching(chat_id, text, RELEVANT_KNOWN)
        found = {memory.id: memory for memory in [*relevant, *newest]}
        return [ExistingMemory(m.id, m.category, m.content) for m in found.values()]


def configured_embedder(config: Config) -> EmbedderFactory:
    """Loads `[memory] embedding_model` when first called."""
    return lambda: load_embedder(config.memory.embedding_model, config.memory.query_precision)
