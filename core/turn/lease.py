"""One turn at a time per chat across processes: a lease row per chat in the database.

A dispatcher claims a chat's lease before its turns and renews it while they run, so a
second process on the same database waits instead of interleaving the chat. A process
that dies leaves a lease that expires; one on this host whose process is gone (kill -9,
then a restart) is taken over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable

from core.storage.store import DeliveryStore, TurnLease

logger = logging.getLogger(__name__)

TURN_LEASE_S = 20.0  # renewed every quarter of it while the turn runs
POLL_S = 0.2  # how often a waiting process looks at a lease held elsewhere


def new_owner_id() -> str:
    """A token unique to one dispatcher: host, process and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def owner_is_gone(owner: str) -> bool:
    """True when `owner` names a process on this host that no longer runs."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False  # another dispatcher of this very process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


class TurnLeases:
    """Claims, renews and releases the turn leases of one dispatcher (one owner)."""

    def __init__(
        self,
        store: DeliveryStore,
        lease_s: float = TURN_LEASE_S,
        poll_s: float = POLL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.clock = clock
        self.owner = new_owner_id()
        self._renewals: set[asyncio.Task[None]] = set()

    def try_claim(self, chat_id: int) -> TurnLease | None:
        """The chat's lease for this owner, or None while another live owner holds it."""
        now = self.clock()
        holder = self.store.turn_holder(chat_id)
        stale = ""
        if holder is not None and holder.owner != self.owner and holder.expires_at > now:
            if not owner_is_gone(holder.owner):
                return None
            stale = holder.owner
            logger.info("taking over chat %d from %s (process gone)", chat_id, stale)
        expires = now + self.lease_s
        if not self.store.claim_turn(chat_id, self.owner, expires, now, stale):
            return None
        return TurnLease(chat_id, self.owner, expires)

    @contextlib.asynccontextmanager
    async def held(self, lease: TurnLease) -> AsyncIterator[TurnLease]:
        """Keep `lease` renewed while inside; release it on the way out.

        Leaving does not wait (the renewal is cancelled, not awaited), so a dispatcher
        that hands a reply over and finds nothing more to do is done with the database
        before its caller runs again.
        """
        renewing = asyncio.create_task(self._renew(lease), name=f"turn-lease-{lease.chat_id}")
        self._renewals.add(renewing)
        renewing.add_done_callback(self._renewals.discard)
        try:
            yield lease
        finally:
            renewing.cancel()
            try:
                self.store.release_turn(lease)
            except Exception:  # it expires on its own
                logger.exception("could not release the turn lease of chat %d", lease.chat_id)

    async def _renew(self, lease: TurnLease) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 4)
            try:
                renewed = self.store.renew_turn(lease, self.clock() + self.lease_s)
            except Exception:
                logger.exception("renewing the turn lease of chat %d failed", lease.chat_id)
                continue
            if not renewed:
                logger.warning("lost the turn lease of chat %d to another process", lease.chat_id)
                return
