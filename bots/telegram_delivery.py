"""Sending a reply to Telegram: Markdown → entities, split at 4,096, plain-text fallback.

The model writes Markdown; telegramify-markdown turns it into plain text plus
`MessageEntity`s (no hand-written MarkdownV2 escaping). If Telegram still rejects the
entities, the same part is sent again as plain text, so a reply is never lost to formatting.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import telegramify_markdown
from telegram import Bot, MessageEntity, ReplyParameters
from telegram.error import BadRequest

from bots.message_split import split_message

logger = logging.getLogger(__name__)

TELEGRAM_LIMIT = 4096


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
    """Send `markdown` as one or more messages; the first quotes `reply_to`. Returns the count."""
    sent = 0
    fallen_back: set[str] = set()
    for part in format_reply(markdown):
        if part.source in fallen_back:
            continue  # this source was already sent whole as plain text
        reply = ReplyParameters(reply_to, allow_sending_without_reply=True) if reply_to else None
        try:
            await bot.send_message(
                chat_id,
                part.text,
                entities=part.entities or None,
                message_thread_id=thread_id,
                reply_parameters=reply if sent == 0 else None,
            )
        except BadRequest as exc:
            if not part.entities or not _is_entity_error(exc):
                raise
            logger.warning("formatting rejected (%s); resending as plain text", exc)
            await bot.send_message(
                chat_id,
                part.source,
                message_thread_id=thread_id,
                reply_parameters=reply if sent == 0 else None,
            )
            fallen_back.add(part.source)
        sent += 1
    return sent


def _is_entity_error(exc: BadRequest) -> bool:
    message = exc.message.lower()
    return "entit" in message or "parse" in message
