"""The task runner: a service of `mnemo run` that fires due tasks exactly once.

Each pass claims the due tasks with a lease (`TaskStore.claim_due`), then for each one, in
one transaction, records the run (next run, state, failures; only while the lease is still
this runner's) together with what it sends: a reminder's text as a message nobody asked for
(`DeliveryStore.post`, unique per run), or a `run` task's prompt as an inbound message with
an id of Mnemo's (unique per run too), answered by the chat's turn like any message. Once
committed, the dispatcher is woken (`core.turn.outgoing`) and delivers it with the usual
tracking and retries. A crash before the commit leaves the lease to expire and the task to
be claimed again; after it, the stored message is delivered by the next start's sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import cast

from core.api import Chat, ChatKind, Inbound, Outbound
from core.config import TasksConfig
from core.errors import LeaseLost
from core.storage.database import Database
from core.storage.delivery_store import DatabaseDeliveryStore
from core.tasks.schedule import Schedule, following_run, format_local
from core.tasks.task_store import RunOutcome, ScheduledTask, TaskStore
from core.turn.lease import new_owner_id
from core.turn.outgoing import Outgoing

logger = logging.getLogger(__name__)

TASK_RUN_PREFIX = "mnemo-task:"  # the inbound message id of a `run` task's prompt
MIN_WAIT_S = 0.05
RETRY_AFTER_ERROR_S = 60.0


def reminder_text(task: ScheduledTask) -> str:
    return f"⏰ Reminder: {task.text}"


def run_prompt(task: ScheduledTask) -> str:
    who = task.creator_name or "someone in this chat"
    return f"[Scheduled task #{task.id}, set by {who}; do it now] {task.text}"


def task_of_run(message_id: str) -> int | None:
    """The task whose run a message is (its inbound id), or None for any other message."""
    if not message_id.startswith(TASK_RUN_PREFIX):
        return None
    head = message_id.removeprefix(TASK_RUN_PREFIX).partition(":")[0]
    return int(head) if head.isdigit() else None


def at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


@dataclass(frozen=True)
class Firing:
    """What one claimed run writes: its outcome and the message it stores (if any)."""

    outcome: RunOutcome
    message: Outbound | None = None
    origin: str = ""
    prompt: Inbound | None = None


class TaskRunner:
    """Claims and fires due tasks; `nudge()` makes it look now (a task was just added)."""

    name = "tasks"

    def __init__(
        self,
        config: TasksConfig,
        db: Database,
        outgoing: Outgoing,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.db = db
        self.tasks = TaskStore(db)
        self.deliveries = DatabaseDeliveryStore(db)
        self.outgoing = outgoing
        self.clock = clock
        self.owner = new_owner_id()
        self._nudged: asyncio.Event | None = None

    def nudge(self) -> None:
        if self._nudged is not None:
            self._nudged.set()

    async def run(self) -> None:
        """Fire due tasks until cancelled, looking again when the soonest falls due, when
        nudged, and every `poll_s` at least (tasks other processes added)."""
        self._nudged = asyncio.Event()
        while True:
            try:
                full = self.fire_due() >= self.config.claim_batch
            except Exception:  # the database is away: try again at the next pass
                logger.exception("firing due tasks failed")
                full = False
            if full:
                await asyncio.sleep(0)  # more are due: let the dispatcher send meanwhile
            else:
                await self._wait()

    async def _wait(self) -> None:
        assert self._nudged is not None
        delay = self.config.poll_s
        try:
            soonest = self.tasks.next_due_at(self.clock())
        except Exception:
            logger.exception("could not look up the next due task")
            soonest = None
        if soonest is not None:
            delay = min(delay, max(MIN_WAIT_S, soonest - self.clock()))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._nudged.wait(), delay)
        self._nudged.clear()

    def fire_due(self) -> int:
        """Claim the due tasks and fire each; how many were claimed."""
        now = self.clock()
        claimed = self.tasks.claim_due(
            self.owner, now, now + self.config.lease_s, self.config.claim_batch
        )
        for task in claimed:
            self._fire(task)
        return len(claimed)

    def _fire(self, task: ScheduledTask) -> None:
        now = self.clock()
        try:
            self._commit(task, self.firing(task, now), now)
        except LeaseLost:
            logger.warning("task %d: its lease passed to another process; left to it", task.id)
            return
        except Exception as exc:
            logger.exception("task %d in %s could not fire", task.id, task.chat.key)
            self._failed(task, exc, now)
            return
        self.outgoing.wake(task.chat.id)

    def firing(self, task: ScheduledTask, now: float) -> Firing:
        """What running `task` (claimed, due) at `now` writes."""
        assert task.next_run_at is not None
        due = task.next_run_at
        schedule = Schedule(
            task.schedule_kind,  # type: ignore[arg-type]
            task.expression,
            task.timezone,
        )
        following = following_run(schedule, at(due), at(now))
        next_at = following.timestamp() if following is not None else None
        status = "active" if next_at is not None else "done"
        origin = f"task:{task.id}:{int(due)}"
        if task.failures >= self.config.max_failures:
            return self._paused(task, now, task.last_error or "its runs kept failing")
        if now - due > self.config.grace_s:
            when = format_local(at(due), task.timezone)
            text = f"⏰ Missed (due {when}, while I was offline): {task.text}"
            outcome = RunOutcome(next_at, status, task.failures, ran=False, last_error="missed")
            return Firing(outcome, _outbound(task.chat, text), f"{origin}:missed")
        if task.mode == "remind":
            outcome = RunOutcome(next_at, status, 0, ran=True)
            return Firing(outcome, _outbound(task.chat, reminder_text(task)), origin)
        # A run counts as failed until its turn answers (`TaskStore.run_worked`).
        outcome = RunOutcome(next_at, status, task.failures + 1, ran=True)
        prompt = Inbound(
            task.chat.channel,
            task.chat.external_chat_id,
            run_prompt(task),
            sender_id=task.creator_id,
            sender_name=task.creator_name,
            chat_kind=cast(ChatKind, task.chat.kind),
            chat_title=task.chat.title,
            message_id=f"{TASK_RUN_PREFIX}{task.id}:{int(due)}",
        )
        return Firing(outcome, prompt=prompt)

    def _paused(self, task: ScheduledTask, now: float, why: str) -> Firing:
        failures = max(task.failures, self.config.max_failures)
        text = (
            f"Task #{task.id} ({task.text[:80]}) is paused: it failed {failures} times in a"
            f" row ({why[:200]}). Cancel it with /cancel {task.id}."
        )
        outcome = RunOutcome(None, "paused", failures, ran=False, last_error=why)
        return Firing(outcome, _outbound(task.chat, text), f"task:{task.id}:paused:{int(now)}")

    def _commit(self, task: ScheduledTask, firing: Firing, now: float) -> None:
        with self.db.transaction():
            if not self.tasks.finish_run(task.id, self.owner, firing.outcome, now):
                raise LeaseLost(f"task {task.id} is no longer leased to this runner")
            if firing.message is not None:
                self.deliveries.post(task.chat.id, firing.message, firing.origin)
            if firing.prompt is not None:
                self.deliveries.receive(task.chat, firing.prompt)

    def _failed(self, task: ScheduledTask, exc: Exception, now: float) -> None:
        """A run that could not be stored: tried again later, paused after too many."""
        error = f"{type(exc).__name__}: {exc}"
        failures = task.failures + 1
        if failures >= self.config.max_failures:
            firing = self._paused(replace(task, failures=failures), now, error)
        else:
            retry = now + RETRY_AFTER_ERROR_S * failures
            firing = Firing(RunOutcome(retry, "active", failures, ran=False, last_error=error))
        try:
            self._commit(task, firing, now)
        except Exception:
            logger.exception("task %d: could not record its failure; its lease expires", task.id)
            return
        self.outgoing.wake(task.chat.id)


def _outbound(chat: Chat, text: str) -> Outbound:
    return Outbound(chat.channel, chat.external_chat_id, text)
