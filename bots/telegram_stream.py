"""Showing a reply on Telegram as it grows: a draft in private chats, an edited message in
groups and topics.

Private chats get `sendMessageDraft` (an animated draft Telegram shows for ~30 s), then
the reply's real `sendMessage`. Groups get a first message that is edited in place as the
text grows; the final reply edits it once more (with its formatting) instead of sending
another. At most one call per `interval_s` per chat; a 429 holds the chat back for its
`retry_after`. The first call waits `FIRST_SHOW_S` (or the interval, if shorter) from the
first words: a reply written within it goes out as its one real message, with no draft or
edit just before it (two API calls instead of one, against Telegram's per-bot rate). Partial
text goes out plain
(half-written Markdown is not yet valid) and split at 4,096: a group's stream starts a new
message when the current one is full; a draft shows the part being written.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import telegramify_markdown
from telegram import Bot, ReplyParameters
from telegram.error import BadRequest, RetryAfter, TelegramError

from bots.message_split import split_message
from bots.telegram_delivery import TELEGRAM_LIMIT, FormattedPart, format_reply
from core.api import Outbound
from core.errors import DeliveryFailed

logger = logging.getLogger(__name__)

FIRST_SHOW_S = 0.5  # a reply done sooner needs no preview; later ones show within 1 s
DRAFT_REFRESH_S = 20.0  # a draft lives ~30 s: shown again before then even if unchanged
FINAL_RETRIES = 3  # 429s waited out while editing in the final text
_draft_ids = itertools.count(1)


@dataclass
class ReplyStream:
    """One reply being shown as it grows in one chat (or topic)."""

    chat_id: int
    thread_id: int | None
    reply_to: int | None
    draft_id: int = 0  # non-zero: a private chat's draft
    message_ids: list[int] = field(default_factory=list)  # a group's edited messages
    shown: list[str] = field(default_factory=list)  # the text each message shows
    last_call: float = float("-inf")
    hold_until: float = float("-inf")
    calls: int = 0
    last_draft: str = ""  # what the draft shows, to show again before it expires

    @property
    def drafting(self) -> bool:
        return self.draft_id != 0


class TelegramStreams:
    """The replies being shown as they grow, by (chat, the message they answer)."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._open: dict[tuple[str, str], ReplyStream] = {}

    def open_stream(self, message: Outbound, chat_id: int, thread_id: int | None) -> ReplyStream:
        key = (message.chat_id, message.reply_to)
        stream = self._open.get(key)
        if stream is None:
            quote = int(message.reply_to) if message.reply_to.isdigit() else None
            stream = ReplyStream(chat_id, thread_id, quote if chat_id < 0 else None)
            # The first call becomes due FIRST_SHOW_S (at most one interval) from now.
            stream.last_call = self.clock() + min(FIRST_SHOW_S, self.interval_s) - self.interval_s
            if chat_id > 0:
                stream.draft_id = next(_draft_ids)
            self._open[key] = stream
        return stream

    def current(self, message: Outbound) -> ReplyStream | None:
        """The stream `message` (a final reply) ends, if its text was being shown."""
        return self._open.get((message.chat_id, message.reply_to))

    def close(self, message: Outbound) -> None:
        self._open.pop((message.chat_id, message.reply_to), None)

    async def show(self, bot: Bot, stream: ReplyStream, text: str) -> None:
        """Show `text` (the reply so far) if the chat's throttle allows a call now."""
        now = self.clock()
        due = now - stream.last_call >= self.interval_s
        if now < stream.hold_until or not due or not text.strip():
            return
        pieces = split_message(text, TELEGRAM_LIMIT, telegramify_markdown.utf16_len)
        stream.last_call = now
        try:
            if stream.drafting:
                await _draft(bot, stream, pieces[-1])
            else:
                await _edit_pieces(bot, stream, pieces)
        except RetryAfter as exc:
            stream.hold_until = self.clock() + seconds(exc.retry_after)
            wait_s = seconds(exc.retry_after)
            logger.info("Telegram asked to wait %.0f s; the partial reply waits", wait_s)
        except TelegramError as exc:
            logger.debug("showing a partial reply failed: %s", exc)

    async def refresh_drafts(self, bot: Bot, chat_key: str) -> None:
        """Show again the drafts of `chat_key` (`chat` or `chat:topic`) not refreshed for
        `DRAFT_REFRESH_S`: a draft lives ~30 s, and a turn may pause longer (a slow tool)."""
        for (key, _), stream in list(self._open.items()):
            now = self.clock()
            stale = now - stream.last_call >= DRAFT_REFRESH_S and now >= stream.hold_until
            if key == chat_key and stream.drafting and stream.last_draft and stale:
                stream.last_call = now
                try:
                    await _draft(bot, stream, stream.last_draft)
                except RetryAfter as exc:
                    stream.hold_until = self.clock() + seconds(exc.retry_after)
                except TelegramError as exc:
                    logger.debug("refreshing a draft failed: %s", exc)

    async def finish(self, bot: Bot, stream: ReplyStream, markdown: str) -> None:
        """Put the final `markdown` into a group's edited messages (sending what does not
        fit in them, deleting those left over), once a 429's wait is over. Raises
        `DeliveryFailed` when it cannot."""
        await asyncio.sleep(max(0.0, stream.hold_until - self.clock()))
        parts = format_reply(markdown)
        for index, part in enumerate(parts):
            try:
                await _with_retries(bot, stream, index, part)
            except TelegramError as exc:
                raise DeliveryFailed(
                    f"Telegram refused part {index + 1} of {len(parts)} of a streamed reply"
                    f" to chat {stream.chat_id}: {exc}",
                    parts_sent=index,
                    parts_total=len(parts),
                    retryable=isinstance(exc, RetryAfter),
                ) from exc
        for message_id in stream.message_ids[len(parts) :]:
            try:
                await bot.delete_message(stream.chat_id, message_id)
            except TelegramError as exc:
                logger.warning("could not delete a partial message left over: %s", exc)


async def _draft(bot: Bot, stream: ReplyStream, text: str) -> None:
    await bot.send_message_draft(
        stream.chat_id, stream.draft_id, text, message_thread_id=stream.thread_id
    )
    stream.last_draft = text
    stream.calls += 1


async def _edit_pieces(bot: Bot, stream: ReplyStream, pieces: list[str]) -> None:
    """Bring the group's messages up to `pieces`: edit the changed ones, send new ones."""
    for index, piece in enumerate(pieces):
        if index < len(stream.message_ids):
            if stream.shown[index] != piece:
                await bot.edit_message_text(piece, stream.chat_id, stream.message_ids[index])
                stream.shown[index] = piece
                stream.calls += 1
            continue
        quote = stream.reply_to if index == 0 else None
        sent = await bot.send_message(
            stream.chat_id,
            piece,
            message_thread_id=stream.thread_id,
            reply_parameters=ReplyParameters(quote, allow_sending_without_reply=True)
            if quote
            else None,
        )
        stream.message_ids.append(sent.message_id)
        stream.shown.append(piece)
        stream.calls += 1


async def _final_part(bot: Bot, stream: ReplyStream, index: int, part: FormattedPart) -> None:
    """Part `index` of the final reply: an edit of the message showing it, else a new one."""
    if index >= len(stream.message_ids):
        quote = stream.reply_to if index == 0 else None
        sent = await bot.send_message(
            stream.chat_id,
            part.text,
            entities=part.entities or None,
            message_thread_id=stream.thread_id,
            reply_parameters=ReplyParameters(quote, allow_sending_without_reply=True)
            if quote
            else None,
        )
        stream.message_ids.append(sent.message_id)
        stream.shown.append(part.text)
        return
    message_id = stream.message_ids[index]
    try:
        await bot.edit_message_text(
            part.text, stream.chat_id, message_id, entities=part.entities or None
        )
    except BadRequest as exc:
        if "not modified" in exc.message.lower():
            return
        if not part.entities:
            raise
        await bot.edit_message_text(part.source, stream.chat_id, message_id)  # plain
    stream.shown[index] = part.text


async def _with_retries(bot: Bot, stream: ReplyStream, index: int, part: FormattedPart) -> None:
    """`_final_part`, waiting out up to `FINAL_RETRIES` 429s."""
    for attempt in range(FINAL_RETRIES + 1):
        try:
            await _final_part(bot, stream, index, part)
            return
        except RetryAfter as exc:
            if attempt == FINAL_RETRIES:
                raise
            await asyncio.sleep(seconds(exc.retry_after))


def seconds(retry_after: int | float | timedelta) -> float:
    """A `RetryAfter.retry_after` (seconds, or a timedelta in newer settings) in seconds."""
    if isinstance(retry_after, timedelta):
        return retry_after.total_seconds()
    return float(retry_after)
