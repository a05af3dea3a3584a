"""A Telegram message's photo, image document, voice note or audio file, fetched with
getFile for the core (`core.api.Attachment`); the caption stays the message's text.

Only messages the bot answers are fetched (unaddressed group chatter keeps its `[image]`
placeholder); a file over the download cap or one Telegram will not hand over becomes an
attachment with an `error`, which the core turns into a clear reply.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, replace
from datetime import timedelta

from telegram import Audio, Message, Voice
from telegram.error import TelegramError
from telegram.warnings import PTBDeprecationWarning

from bots.telegram_inbound import media_placeholder
from core.api import Attachment, Inbound
from core.events import MediaKind

logger = logging.getLogger(__name__)

DEFAULT_MAX_DOWNLOAD = 20_000_000  # the Bot API's own getFile limit


@dataclass(frozen=True)
class MediaFile:
    """Which file of a message to fetch, and what Telegram says about it."""

    kind: MediaKind
    file_id: str
    size: int | None
    mime: str
    filename: str
    duration_s: float | None = None


def media_file(message: Message) -> MediaFile | None:
    """The photo (largest size), image document, voice note or audio file of `message`."""
    if message.photo:
        largest = message.photo[-1]
        return MediaFile("image", largest.file_id, largest.file_size, "image/jpeg", "photo.jpg")
    document = message.document
    if document is not None and (document.mime_type or "").startswith(("image/", "audio/")):
        kind: MediaKind = "image" if document.mime_type.startswith("image/") else "audio"  # type: ignore[union-attr]
        return MediaFile(kind, document.file_id, document.file_size, document.mime_type or "",
                         document.file_name or "")  # fmt: skip
    if message.voice is not None:
        voice = message.voice
        return MediaFile("voice", voice.file_id, voice.file_size, voice.mime_type or "audio/ogg",
                         "voice.ogg", _seconds(voice))  # fmt: skip
    if message.audio is not None:
        audio = message.audio
        return MediaFile("audio", audio.file_id, audio.file_size, audio.mime_type or "",
                         audio.file_name or "audio", _seconds(audio))  # fmt: skip
    return None


def _seconds(media: Voice | Audio) -> float:
    """A voice note's or audio file's duration in seconds: an int in PTB 22.x, a timedelta
    later (reading it as an int warns of that change, which is not ours to act on)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        duration: object = media.duration
    if isinstance(duration, timedelta):
        return duration.total_seconds()
    return float(duration) if isinstance(duration, int | float) else 0.0


async def with_media(message: Message, inbound: Inbound, max_bytes: int) -> Inbound:
    """`inbound` with its file fetched as an attachment (its text then the caption alone);
    unchanged when it has none or is not to be answered."""
    found = media_file(message)
    if found is None or not inbound.respond:
        return inbound
    attachment = await _fetch(message, found, max_bytes)
    placeholder = media_placeholder(message) or ""
    caption = inbound.text.removeprefix(placeholder).strip()
    return replace(inbound, text=caption, attachments=(attachment,))


async def _fetch(message: Message, found: MediaFile, max_bytes: int) -> Attachment:
    described = Attachment(found.kind, b"", found.mime, found.filename, found.duration_s)
    if found.size is not None and found.size > max_bytes:
        return replace(described, error=_too_large(found.size, max_bytes))
    try:
        telegram_file = await message.get_bot().get_file(found.file_id)
        data = bytes(await telegram_file.download_as_bytearray())
    except TelegramError as exc:
        logger.warning("could not fetch %s %s: %s", found.kind, found.file_id, exc)
        return replace(described, error=f"Telegram did not hand the file over ({exc})")
    if len(data) > max_bytes:
        return replace(described, error=_too_large(len(data), max_bytes))
    return replace(described, data=data)


def _too_large(size: int, max_bytes: int) -> str:
    return f"the file is {size / 1e6:.1f} MB; the limit is {max_bytes / 1e6:.0f} MB"
