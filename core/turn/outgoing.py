"""Messages that start from Mnemo itself (a reminder now, proactive messages later).

Such a message is stored like a reply, in the chat's outbox with no inbox row
(`DeliveryStore.post`, in the sender's own transaction), or, for a prompt to run, as an
inbound message with an id of Mnemo's (`DeliveryStore.receive`); the dispatcher then
delivers it (or runs its turn) with the same tracking, retries and exactly-once rules as
any reply. `Outgoing` is how a sender tells the dispatcher there is something to do: the
dispatcher binds to it when built, so a service never needs the dispatcher itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)


class Outgoing:
    """Wakes the chats that have a stored message nobody asked for."""

    def __init__(self) -> None:
        self._wake: Callable[[int], None] | None = None

    def bind(self, wake: Callable[[int], None]) -> None:
        """The dispatcher's way to take a chat's turns (or deliver its messages) now."""
        self._wake = wake

    @property
    def bound(self) -> bool:
        return self._wake is not None

    def wake(self, chat_id: int) -> None:
        """Call after the message's transaction committed. Unbound (no dispatcher in this
        process, e.g. a CLI), the message waits for the next dispatcher's sweep."""
        if self._wake is not None:
            self._wake(chat_id)
        else:
            logger.debug("no dispatcher: chat %d's new message waits for a sweep", chat_id)
