"""A Discord message's image and audio attachments (voice messages too), fetched from
Discord's CDN for the core (`core.api.Attachment`); their placeholders leave the text.

Only messages the bot answers are fetched; one over the download cap, or one the CDN will
not serve, becomes an attachment with an `error` (the core replies with the reason).
"""

from __future__ import annotations

import logging
from dataclasses import replace

import discord

from core.api import Attachment, Inbound
from core.events import MediaKind

logger = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
AUDIO_SUFFIXES = (".ogg", ".oga", ".mp3", ".m4a", ".wav", ".webm", ".flac")


def media_kind(attachment: discord.Attachment) -> MediaKind | None:
    """What the core can make of `attachment`: an image, a voice message, an audio file."""
    content_type = (attachment.content_type or "").lower()
    name = attachment.filename.lower()
    if content_type.startswith("image/") or name.endswith(IMAGE_SUFFIXES):
        return "image"
    if attachment.is_voice_message():
        return "voice"
    if content_type.startswith("audio/") or name.endswith(AUDIO_SUFFIXES):
        return "audio"
    return None


async def with_media(message: discord.Message, inbound: Inbound, max_bytes: int) -> Inbound:
    """`inbound` with its images and audio fetched as attachments, their placeholders
    (`[image]`, `[file: name]`) out of the text; unchanged when none or not answered."""
    if not inbound.respond:
        return inbound
    fetched: list[Attachment] = []
    text = inbound.text
    for attachment in message.attachments:
        kind = media_kind(attachment)
        if kind is None:
            continue
        fetched.append(await _fetch(attachment, kind, max_bytes))
        for placeholder in ("[image]", f"[file: {attachment.filename}]"):
            if placeholder in text:
                text = text.replace(placeholder, "", 1)
                break
    if not fetched:
        return inbound
    return replace(inbound, text=" ".join(text.split()), attachments=tuple(fetched))


async def _fetch(attachment: discord.Attachment, kind: MediaKind, max_bytes: int) -> Attachment:
    described = Attachment(kind, b"", attachment.content_type or "", attachment.filename,
                           attachment.duration)  # fmt: skip
    if attachment.size > max_bytes:
        size = f"{attachment.size / 1e6:.1f} MB"
        return replace(
            described, error=f"the file is {size}; the limit is {max_bytes / 1e6:.0f} MB"
        )
    try:
        data = await attachment.read()
    except (discord.HTTPException, OSError, ValueError) as exc:
        logger.warning("could not fetch attachment %s: %s", attachment.id, exc)
        return replace(described, error=f"Discord did not hand the file over ({exc})")
    if len(data) > max_bytes:
        return replace(described, error=f"the file is over {max_bytes / 1e6:.0f} MB")
    return replace(described, data=data)
