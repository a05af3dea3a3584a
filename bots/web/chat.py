"""Chatting from the dashboard: a channel like the terminal, whose chats are `web:<name>`.

`WebChatChannel` is attached to the dispatcher like any channel; the chat page's POST
(`bots.web.chat_page`) hands it a message with `ask`, which yields the reply as it grows
(`show_partial`, when streaming is on) and then the final text (`send`), for the page to
read as server-sent events. A page closed mid-turn costs nothing: the turn finishes and
its reply is stored, shown in the chat's history next time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from core.api import Handler, Inbound, Outbound

logger = logging.getLogger(__name__)

CHANNEL = "web"
CHAT_NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
DEFAULT_CHAT = "dashboard"
SENDER_ID = "operator"
SENDER_NAME = "operator"
MAX_MESSAGE_CHARS = 20_000
NOT_RUNNING = "The bot is not running in this process, so it cannot answer here."

EventKind = Literal["partial", "reply", "error"]


@dataclass(frozen=True)
class ChatEvent:
    """What the page is told: the reply so far, the final reply, or an error."""

    kind: EventKind
    text: str

    @property
    def final(self) -> bool:
        return self.kind != "partial"


def valid_chat_name(name: str) -> bool:
    return bool(CHAT_NAME.fullmatch(name))


class WebChatChannel:
    """A `core.api.Channel` (and `StreamingChannel`) for the dashboard's chat page."""

    name = CHANNEL

    def __init__(self, streaming: bool = True) -> None:
        self.streaming = streaming
        self._handler: Handler | None = None
        self._listening: dict[str, asyncio.Queue[ChatEvent]] = {}  # message id → its page
        self._turns: set[asyncio.Future[Outbound | None]] = set()

    def bind(self, handler: Handler) -> None:
        self._handler = handler

    async def run(self, handler: Handler) -> None:
        """Serve until cancelled: the dashboard's server brings the messages."""
        self.bind(handler)
        await asyncio.get_running_loop().create_future()

    @contextlib.asynccontextmanager
    async def typing(self, chat_id: str) -> AsyncIterator[None]:
        """No indicator: the page shows its own while it waits."""
        yield

    async def show_partial(self, message: Outbound) -> None:
        queue = self._listening.get(message.reply_to)
        if queue is not None:
            queue.put_nowait(ChatEvent("partial", message.text))

    async def send(self, message: Outbound) -> None:
        """Hand the reply to the page waiting for it; with none (it was closed, or the
        reply is left from an earlier run) the reply stays in the chat's history."""
        queue = self._listening.get(message.reply_to)
        if queue is not None:
            queue.put_nowait(ChatEvent("error" if message.is_error else "reply", message.text))

    async def ask(self, chat_name: str, text: str) -> AsyncIterator[ChatEvent]:
        """Send `text` to the chat `web:<chat_name>`; yield the reply as it grows, ending
        with the final reply (or an error)."""
        if self._handler is None:
            yield ChatEvent("error", NOT_RUNNING)
            return
        message_id = uuid.uuid4().hex
        queue: asyncio.Queue[ChatEvent] = asyncio.Queue()
        self._listening[message_id] = queue
        inbound = Inbound(CHANNEL, chat_name, text, SENDER_ID, SENDER_NAME, "private",
                          f"Dashboard chat {chat_name}", True, message_id)  # fmt: skip
        turn: asyncio.Future[Outbound | None] = asyncio.ensure_future(self._handler(inbound))
        self._turns.add(turn)  # kept to the end even if the page goes away
        turn.add_done_callback(self._turns.discard)
        try:
            async for event in _events(queue, turn):
                yield event
        finally:
            self._listening.pop(message_id, None)


async def _events(
    queue: asyncio.Queue[ChatEvent], turn: asyncio.Future[Outbound | None]
) -> AsyncIterator[ChatEvent]:
    """The queue's events until a final one; if the turn ends without sending one (the
    reply was returned instead, or none was due), that ends the stream."""
    while True:
        if queue.empty() and turn.done():
            yield _ending(turn)
            return
        getting = asyncio.ensure_future(queue.get())
        waiting: set[asyncio.Future[Any]] = {getting, turn}
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when the page went away mid-wait
            if not getting.done():
                getting.cancel()
        if getting.cancelled():
            continue
        event = getting.result()
        yield event
        if event.final:
            return


def _ending(turn: asyncio.Future[Outbound | None]) -> ChatEvent:
    if turn.cancelled() or turn.exception() is not None:
        return ChatEvent("error", "Sorry, something went wrong; your message may not be saved.")
    reply = turn.result()
    if reply is None:
        return ChatEvent("error", "No reply is due (the bot is stopping); try again shortly.")
    return ChatEvent("error" if reply.is_error else "reply", reply.text)
