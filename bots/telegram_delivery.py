"""Sending a reply to Telegram: Markdown → entities, split at 4,096, plain-text fallback.

The model writes Markdown; telegramify-markdown turns it into plain text plus
`MessageEntity`s (no hand-written MarkdownV2 escaping). If Telegram still rejects the
entities, the same part is sent again as plain text, so a reply is never lost to formatting.
Every request goes through `ReplyRateLimiter`: Telegram's flood limits are kept, and a 429
part-way through a long reply is waited out (its `retry_after`) and the part sent again.
When a reply cannot be delivered after that, `deliver` raises `DeliveryFailed`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import telegramify_markdown
from telegram import Bot, MessageEntity, ReplyParameters
from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError, TimedOut
from telegram.ext import AIORateLimiter

from bots.message_split import split_message
from core.errors import DeliveryFailed

logger = logging.getLogger(__name__)

TELEGRAM_LIMIT = 4096
SEND_RETRIES = 3  # 429s waited out per request before the send fails
# Straight through: "typing…" is no message in Telegram's per-group limit, and a partial
# reply's draft or edit is throttled by `bots.telegram_stream`, which backs off a 429 itself
# (a partial waited out and sent late is worthless).
UNLIMITED = {"sendChatAction", "sendMessageDraft", "editMessageText"}


class ReplyRateLimiter(AIORateLimiter):
    """python-telegram-bot's AIORateLimiter (30 messages a second, 20 a minute per group,
    a 429 waited out and retried `SEND_RETRIES` times) for what the bot sends.

    "typing…" goes straight through: it is no message in Telegram's per-group limit, so
    it must not use up the replies' budget in a busy group, and one sent late is worthless.
    """

    def __init__(self, max_retries: int = SEND_RETRIES, **limits: float) -> None:
        super().__init__(max_retries=max_retries, **limits)

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, bool | dict[str, Any] | list[Any]]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> bool | dict[str, Any] | list[Any]:
        if endpoint in UNLIMITED:
            return await callback(*args, **kwargs)
        return await super().process_request(
            callback, args, kwargs, endpoint, data, rate_limit_args
        )


@dataclass(frozen=True)
class FormattedPart:
    """One message: plain text, its entities, and the Markdown source to fall back to."""

    text: str
    entities: tuple[MessageEntity, ...]
    source: str


def format_reply(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[FormattedPart]:
    """The reply as Telegram messages, each at most `limit` UTF-16 code units."""
    parts: list[FormattedPart] = []
    for source in split_message(markdown, limit, telegramify_markdown.utf16_len):
        try:
            text, entities = telegramify_markdown.convert(source)
        except Exception:  # a converter bug must not cost the reply
            logger.warning("Markdown conversion failed; sending plain text", exc_info=True)
            parts.append(FormattedPart(source, (), source))
            continue
        for piece, piece_entities in telegramify_markdown.split_entities(text, entities, limit):
            converted = tuple(MessageEntity.de_json(e.to_dict(), None) for e in piece_entities)
            parts.append(FormattedPart(piece, converted, source))
    return parts


async def deliver(
    bot: Bot,
    chat_id: int,
    markdown: str,
    *,
    thread_id: int | None = None,
    reply_to: int | None = None,
) -> int:
    """Send `markdown` as one or more messages; the first quotes `reply_to`. Returns the count.

    Raises `DeliveryFailed` (saying how many parts went out) when Telegram refuses a part
    for good or still answers 429 after `SEND_RETRIES` waits.
    """
    parts = format_reply(markdown)
    sent = 0
    fallen_back: set[str] = set()
    for index, part in enumerate(parts):
        if part.source in fallen_back:
            continue  # this source was already sent whole as plain text
        quote = ReplyParameters(reply_to, allow_sending_without_reply=True) if reply_to else None
        try:
            if await _send_part(bot, chat_id, part, thread_id, quote if sent == 0 else None):
                fallen_back.add(part.source)
        except TelegramError as exc:
            raise DeliveryFailed(
                f"Telegram refused part {index + 1} of {len(parts)} of a reply to chat"
                f" {chat_id}: {exc}",
                parts_sent=index,
                parts_total=len(parts),
                retryable=_retryable(exc),
            ) from exc
        sent += 1
    return sent


async def _send_part(
    bot: Bot,
    chat_id: int,
    part: FormattedPart,
    thread_id: int | None,
    quote: ReplyParameters | None,
) -> bool:
    """Send one part; True when its entities were refused and its source went as plain text."""
    try:
        await bot.send_message(
            chat_id,
            part.text,
            entities=part.entities or None,
            message_thread_id=thread_id,
            reply_parameters=quote,
        )
        return False
    except BadRequest as exc:
        if not part.entities or not _is_entity_error(exc):
            raise
        logger.warning("formatting rejected (%s); resending as plain text", exc)
    await bot.send_message(
        chat_id, part.source, message_thread_id=thread_id, reply_parameters=quote
    )
    return True


def _retryable(exc: TelegramError) -> bool:
    """A rate limit or the network may pass; a rejected text, a blocked bot or a gone chat not."""
    if isinstance(exc, RetryAfter | TimedOut):
        return True
    return isinstance(exc, NetworkError) and not isinstance(exc, BadRequest)


def _is_entity_error(exc: BadRequest) -> bool:
    message = exc.message.lower()
    return "entit" in message or "parse" in message
