"""Showing a reply on Discord as it grows: a first message edited in place, at most once
per `interval_s` per chat, split at 2,000 characters mid-stream (a new message starts
when the current one is full). The final reply edits the messages once more (sending
what does not fit, deleting what is left over). discord.py waits out a 429 on its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import discord

from bots.message_split import split_message
from core.api import Outbound

logger = logging.getLogger(__name__)

DISCORD_LIMIT = 2000


@dataclass
class DiscordReplyStream:
    """One reply being shown as it grows: the messages showing it, what each shows."""

    reference: discord.MessageReference | None
    messages: list[discord.Message] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)
    last_call: float = float("-inf")
    calls: int = 0


class DiscordStreams:
    """The replies being shown as they grow, by (chat, the message they answer)."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._open: dict[tuple[str, str], DiscordReplyStream] = {}

    def open_stream(
        self, message: Outbound, reference: discord.MessageReference | None
    ) -> DiscordReplyStream:
        key = (message.chat_id, message.reply_to)
        if key not in self._open:
            self._open[key] = DiscordReplyStream(reference)
        return self._open[key]

    def current(self, message: Outbound) -> DiscordReplyStream | None:
        return self._open.get((message.chat_id, message.reply_to))

    def close(self, message: Outbound) -> None:
        self._open.pop((message.chat_id, message.reply_to), None)

    async def show(
        self, destination: discord.abc.Messageable, stream: DiscordReplyStream, text: str
    ) -> None:
        """Show `text` (the reply so far) if the chat's throttle allows a call now."""
        now = self.clock()
        if now - stream.last_call < self.interval_s or not text.strip():
            return
        stream.last_call = now
        try:
            await sync_messages(destination, stream, split_message(text, DISCORD_LIMIT))
        except discord.DiscordException as exc:
            logger.debug("showing a partial reply failed: %s", exc)

    async def finish(
        self, destination: discord.abc.Messageable, stream: DiscordReplyStream, text: str
    ) -> None:
        """Put the final `text` into the stream's messages; delete those left over."""
        parts = split_message(text, DISCORD_LIMIT)
        await sync_messages(destination, stream, parts)
        for extra in stream.messages[len(parts) :]:
            await extra.delete()
        del stream.messages[len(parts) :]
        del stream.shown[len(parts) :]


async def sync_messages(
    destination: discord.abc.Messageable, stream: DiscordReplyStream, pieces: list[str]
) -> None:
    """Bring the stream's messages up to `pieces`: edit the changed ones, send new ones."""
    for index, piece in enumerate(pieces):
        if index < len(stream.messages):
            if stream.shown[index] != piece:
                stream.messages[index] = await stream.messages[index].edit(content=piece)
                stream.shown[index] = piece
                stream.calls += 1
            continue
        if index == 0 and stream.reference is not None:
            sent = await destination.send(piece, reference=stream.reference)
        else:
            sent = await destination.send(piece)
        stream.messages.append(sent)
        stream.shown.append(piece)
        stream.calls += 1
