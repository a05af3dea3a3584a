"""Every inbound message is stored as it arrives, then answered in its chat's turn.

A chat's turns run one at a time, oldest message first, and in one process at a time (a
lease row, `core.turn.lease`); different chats run concurrently. A reply is recorded
with its turn and goes out through the chat's channel once attached (retried with
backoff, marked delivered only when `Channel.send` returned). What a stop, a crash or
another process left behind (messages not answered, replies not delivered) is taken up
by `resume()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from core.errors import LeaseLost, StorageFull
from core.events import Channel, Inbound, Outbound, StreamingChannel, streams
from core.storage.store import DeliveryStore, StoredInbound, StoredReply, TurnLease
from core.turn.lease import TurnLeases
from core.turn.outgoing import Outgoing

logger = logging.getLogger(__name__)

SEND_RETRY_DELAYS_S = (1.0, 2.0, 4.0)  # between the attempts of one delivery
MAX_DELIVERY_ATTEMPTS = 50  # over sweeps and restarts (~6 min of outage); then given up
SHUTDOWN_GRACE_S = 5.0  # running turns may finish within it; then they are cancelled
SWEEP_S = 30.0  # how often leftovers (of other processes too) are looked for

CRASH_REPLY = "Sorry, something went wrong on my side. Your message is saved; please try again."
FULL_REPLY = (
    "Sorry, the server's disk is full, so I could not finish answering. Your message is"
    " saved; please try again later."
)
NOT_STORED_REPLY = (
    "Sorry, something went wrong on my side and your message was not saved. Please send it"
    " again later."
)
NOT_STORED_FULL_REPLY = (
    "Sorry, the server's disk is full: your message could not be saved. Please send it again later."
)


class Answering(Protocol):
    """What the dispatcher needs of the agent (`core.turn.agent.Agent`)."""

    @property
    def deliveries(self) -> DeliveryStore: ...

    @property
    def outgoing(self) -> Outgoing: ...

    def accept(self, inbound: Inbound) -> StoredInbound | None: ...

    async def answer(
        self,
        message: StoredInbound,
        lease: TurnLease | None = None,
        on_text: Callable[[str], Awaitable[None]] | None = None,
    ) -> StoredReply | None: ...


@dataclass(frozen=True)
class _Waiter:
    chat_id: int
    reply: asyncio.Future[Outbound | None]


class Dispatcher:
    """Stores each message at once, runs each chat's turns in order, delivers the replies."""

    def __init__(
        self,
        agent: Answering,
        *,
        leases: TurnLeases | None = None,
        retry_delays_s: tuple[float, ...] = SEND_RETRY_DELAYS_S,
        max_attempts: int = MAX_DELIVERY_ATTEMPTS,
    ) -> None:
        self._agent = agent
        self._store = agent.deliveries
        self.leases = leases or TurnLeases(self._store)
        self._retry_delays_s = retry_delays_s
        self._max_attempts = max_attempts
        self._channels: dict[str, list[Channel]] = {}  # by name, attached order
        self._workers: dict[int, asyncio.Task[None]] = {}  # chat id → its turns
        self._waiters: dict[int, _Waiter] = {}  # inbound id → the caller waiting on it
        self._running: dict[int, int] = {}  # chat id → inbound id whose turn runs
        self._told: set[int] = set()  # inbound ids whose unrecorded error reply went out
        self._arrived: set[int] = set()  # chats with a message received since their last flush
        self._stopping = False
        agent.outgoing.bind(self.wake)

    def attach(self, channel: Channel) -> None:
        """Deliver the replies of `channel`'s chats through it (and show typing there)."""
        self._channels.setdefault(channel.name, []).append(channel)

    def detach(self, channel: Channel) -> None:
        """Stop using `channel` (it ended); its chats' replies wait for the next start."""
        attached = self._channels.get(channel.name, [])
        if channel in attached:
            attached.remove(channel)

    def _channel(self, name: str) -> Channel | None:
        attached = self._channels.get(name)
        return attached[0] if attached else None

    async def __call__(self, inbound: Inbound) -> Outbound | None:
        """Store `inbound` at once, then wait for its turn. Returns the reply for the caller
        to deliver; None when the chat's channel is attached (the reply went out through
        it), when no reply is due, for a replay, or at shutdown (the message stays stored
        and is answered at the next start)."""
        try:
            reply = self.receive(inbound)
        except Exception as exc:
            logger.exception("could not store a message in %s:%s", inbound.channel, inbound.chat_id)
            return await self._not_stored(inbound, exc)
        return await reply

    def receive(self, inbound: Inbound) -> asyncio.Future[Outbound | None]:
        """Store `inbound` now and queue it for its chat's turn; the future gives what
        `__call__` returns. Raises when the message could not be stored: a webhook then
        answers with an error, so the platform sends the update again."""
        done: asyncio.Future[Outbound | None] = asyncio.get_running_loop().create_future()
        message = self._agent.accept(inbound)
        if message is None:
            logger.info("ignoring message %s in %s:%s: already received (a replayed update)",
                        inbound.message_id, inbound.channel, inbound.chat_id)  # fmt: skip
            done.set_result(None)
            return done
        if self._stopping:
            done.set_result(None)
            return done
        self._waiters[message.id] = _Waiter(message.chat.id, done)
        done.add_done_callback(lambda _: self._waiters.pop(message.id, None))
        self._arrived.add(message.chat.id)
        self._wake(message.chat.id)
        return done

    def resume(self) -> list[int]:
        """Take turns (again), starting with the chats of attached channels that have
        messages left pending or replies left undelivered. Returns those chats' ids."""
        self._stopping = False
        names = sorted(name for name, attached in self._channels.items() if attached)
        chats = self._store.chats_awaiting(names, self._max_attempts)
        for chat_id in chats:
            self._wake(chat_id)
        return chats

    def wake(self, chat_id: int) -> None:
        """Take the chat's turns now: a message nobody asked for (a reminder) was stored
        for it, or a pending one of Mnemo's own (a scheduled task's prompt)."""
        self._wake(chat_id)

    async def sweep(self, every_s: float = SWEEP_S) -> None:
        """`resume()` now and then every `every_s` until cancelled: redelivers replies that
        failed, and answers what a process that died left to its lease's expiry."""
        while True:
            chats = self.resume()
            if chats:
                logger.info("taking up %d chats with messages or replies left over", len(chats))
            await asyncio.sleep(every_s)

    async def stop(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Start no more turns; running ones may finish (and deliver) within `grace_s`, then
        they are cancelled. Every message not answered stays stored as pending."""
        self._stopping = True
        running = set(self._running.values())
        self._release(lambda inbound_id, waiter: inbound_id not in running)
        workers = list(self._workers.values())
        if workers:
            _, late = await asyncio.wait(workers, timeout=grace_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
            if late:
                logger.warning("%d chats' turns did not finish within %.0f s; their messages"
                               " are answered at the next start", len(late), grace_s)  # fmt: skip
        self._release(lambda inbound_id, waiter: True)

    # --- a chat's turns ---------------------------------------------------------------

    def _wake(self, chat_id: int) -> None:
        if chat_id not in self._workers and not self._stopping:
            task = asyncio.create_task(self._serve(chat_id), name=f"turns-of-chat-{chat_id}")
            self._workers[chat_id] = task

    async def _serve(self, chat_id: int) -> None:
        """The chat's turns while it has pending messages this worker has not tried yet."""
        tried = 0  # the newest message this worker took a turn for
        try:
            while not self._stopping:
                lease = self.leases.try_claim(chat_id)
                if lease is not None:
                    async with self.leases.held(lease):
                        tried = await self._take_turns(lease, tried)
                elif self._owed(chat_id, tried):
                    await asyncio.sleep(self.leases.poll_s)  # another process has the chat
                    continue
                if not self._owed(chat_id, tried):
                    return  # no await between this check and leaving `_workers`
        except Exception:
            logger.exception("the turns of chat %d stopped; its messages stay pending", chat_id)
        finally:
            del self._workers[chat_id]
            self._arrived.discard(chat_id)
            self._release(lambda inbound_id, waiter: waiter.chat_id == chat_id)

    def _owed(self, chat_id: int, tried: int) -> bool:
        """The chat has a pending message not tried yet, or its oldest undelivered message
        was never tried through an attached channel (one posted while another process held
        the chat). After a failed send it waits for the sweep, as replies do."""
        if self._store.next_pending(chat_id, tried) is not None:
            return True
        owed = self._store.undelivered(chat_id, self._max_attempts)
        return (
            bool(owed)
            and owed[0].attempts == 0
            and self._channel(owed[0].outbound.channel) is not None
        )

    async def _take_turns(self, lease: TurnLease, tried: int) -> int:
        """Deliver what is owed, then answer the pending messages oldest first. Once a
        delivery failed, the chat's replies wait (in order) for the next sweep or start, or
        for a new message: one received since the failure tries the owed replies again, as a
        new worker would (whether the chat's worker was still running must not matter)."""
        delivering = await self._flush(lease.chat_id)
        while not self._stopping:
            message = self._store.next_pending(lease.chat_id, tried)
            if message is None:
                break
            tried = message.id
            try:
                reply = await self._turn(message, lease)
            except LeaseLost as exc:
                logger.warning("chat %s: %s; leaving it to that process", message.chat.key, exc)
                break
            delivering = delivering or lease.chat_id in self._arrived
            delivering = await self._hand_over(message, reply, delivering)
        return tried

    async def _turn(self, message: StoredInbound, lease: TurnLease) -> StoredReply | None:
        """The agent's answer, under a typing indicator; a crash becomes an error reply."""
        chat = message.chat
        channel = self._channel(chat.channel)
        typing: AbstractAsyncContextManager[None] = contextlib.nullcontext()
        on_text = None
        if channel is not None and message.inbound.respond:
            typing = channel.typing(chat.external_chat_id)
            if isinstance(channel, StreamingChannel) and streams(channel):
                on_text = _partial_sink(channel, message.inbound)
        self._running[chat.id] = message.id
        try:
            async with typing:
                return await self._agent.answer(message, lease, on_text)
        except LeaseLost:
            raise
        except Exception as exc:
            logger.exception("turn crashed in %s", chat.key)
            return self._error_reply(message, exc)
        finally:
            del self._running[chat.id]

    def _error_reply(self, message: StoredInbound, exc: Exception) -> StoredReply | None:
        """Record the crashed turn as answered with an apology. If even that cannot be
        stored, the message stays pending and the apology goes out once, unrecorded."""
        inbound = message.inbound
        reply = None
        if inbound.respond:
            text = FULL_REPLY if isinstance(exc, StorageFull) else CRASH_REPLY
            reply = Outbound(
                inbound.channel, inbound.chat_id, text, inbound.message_id, is_error=True
            )
        try:
            return self._store.finish(message.id, reply)
        except Exception:
            logger.exception("could not record the crashed turn in %s; its message stays"
                             " pending", message.chat.key)  # fmt: skip
        if reply is None or message.id in self._told:
            return None
        self._told.add(message.id)
        return StoredReply(0, reply)

    # --- delivery -----------------------------------------------------------------------

    async def _hand_over(
        self, message: StoredInbound, reply: StoredReply | None, delivering: bool
    ) -> bool:
        """Deliver the reply through the chat's channel (while `delivering`), or give it to
        the waiting caller. Returns whether the chat's deliveries still go through."""
        waiter = self._waiters.get(message.id)
        name = message.chat.channel
        result: Outbound | None = None
        if reply is not None and name in self._channels:
            if delivering:
                delivering = await self._flush(message.chat.id)  # after the older ones
            if reply.id == 0 and delivering:
                delivering = await self._deliver(reply)
        elif reply is not None and waiter is not None:
            if reply.id:
                self._store.mark_delivered(reply.id)  # the caller sends it
            result = reply.outbound
        if waiter is not None and not waiter.reply.done():
            waiter.reply.set_result(result)
        return delivering

    async def _flush(self, chat_id: int) -> bool:
        """Deliver the chat's undelivered replies, oldest first; False when one failed."""
        self._arrived.discard(chat_id)
        for reply in self._store.undelivered(chat_id, self._max_attempts):
            if not await self._deliver(reply):
                return False
        return True

    async def _deliver(self, reply: StoredReply) -> bool:
        """`Channel.send` with retries; the reply is marked delivered once a send returned."""
        where = f"{reply.outbound.channel}:{reply.outbound.chat_id}"
        attempts = 1 + len(self._retry_delays_s)
        for attempt, delay in enumerate((0.0, *self._retry_delays_s), start=1):
            if delay:
                await asyncio.sleep(delay)
            channel = self._channel(reply.outbound.channel)
            if channel is None:
                return False  # not attached (any more): delivered at the next start
            try:
                await channel.send(reply.outbound)
            except Exception as exc:
                logger.warning("sending a reply to %s failed (attempt %d of %d): %s",
                               where, attempt, attempts, exc)  # fmt: skip
                if reply.id:
                    self._store.record_failed_attempt(reply.id, f"{type(exc).__name__}: {exc}")
                continue
            if reply.id:
                self._store.mark_delivered(reply.id)
            return True
        logger.error("a reply to %s was not delivered after %d attempts; it is tried again"
                     " later", where, attempts)  # fmt: skip
        return False

    async def _not_stored(self, inbound: Inbound, exc: Exception) -> Outbound | None:
        """Tell the sender their message was not saved (never that it was)."""
        if not inbound.respond:
            return None
        text = NOT_STORED_FULL_REPLY if isinstance(exc, StorageFull) else NOT_STORED_REPLY
        reply = Outbound(inbound.channel, inbound.chat_id, text, inbound.message_id, is_error=True)
        if inbound.channel not in self._channels:
            return reply
        await self._deliver(StoredReply(0, reply))
        return None

    def _release(self, which: Callable[[int, _Waiter], bool]) -> None:
        """Answer the chosen waiting callers with None (their messages stay stored)."""
        for inbound_id, waiter in list(self._waiters.items()):
            if which(inbound_id, waiter) and not waiter.reply.done():
                waiter.reply.set_result(None)


def _partial_sink(channel: StreamingChannel, inbound: Inbound) -> Callable[[str], Awaitable[None]]:
    """Where a streamed answer to `inbound` is shown as it grows. Showing is best effort:
    a failure is logged and the turn goes on (the final reply is still sent)."""

    async def show(text: str) -> None:
        partial = Outbound(inbound.channel, inbound.chat_id, text, inbound.message_id)
        try:
            await channel.show_partial(partial)
        except Exception as exc:
            logger.warning("showing a partial reply in %s:%s failed: %s",
                           inbound.channel, inbound.chat_id, exc)  # fmt: skip

    return show
