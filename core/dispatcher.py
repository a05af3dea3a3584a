"""Per-chat serialisation: one turn at a time in a chat, different chats concurrently."""

from __future__ import annotations

import asyncio
import logging

from core.events import Handler, Inbound, Outbound

logger = logging.getLogger(__name__)

CRASH_REPLY = "Sorry, something went wrong on my side. Your message is saved; please try again."


class Dispatcher:
    """Wraps a handler so that turns of one chat never overlap and crashes become replies."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._waiting: dict[tuple[str, str], int] = {}

    async def __call__(self, inbound: Inbound) -> Outbound | None:
        key = (inbound.channel, inbound.chat_id)
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._waiting[key] = self._waiting.get(key, 0) + 1
        try:
            async with lock:
                return await self._handle(inbound)
        finally:
            self._waiting[key] -= 1
            if self._waiting[key] == 0:
                del self._waiting[key]
                del self._locks[key]

    async def _handle(self, inbound: Inbound) -> Outbound | None:
        try:
            return await self._handler(inbound)
        except Exception:
            logger.exception("turn crashed in %s:%s", inbound.channel, inbound.chat_id)
            if not inbound.respond:
                return None
            return Outbound(
                inbound.channel, inbound.chat_id, CRASH_REPLY, inbound.message_id, is_error=True
            )
