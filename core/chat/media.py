"""A message's images and voice notes: kept in the chat's files as the message is stored,
named in its text by a placeholder, and turned into what the model gets in its turn.

The stored text never holds media bytes. An image is `[image file=media/<sha>.jpg]` in the
history; only the turn that answers it sends the image itself, as an OpenAI image part
attached to that message in the request (`with_images`), so later turns never resend it
and the reflector reads the caption and the model's answer. A voice note is
`[voice file=media/<sha>.ogg 7s]` until its turn transcribes it; the history then keeps
`[voice file=…] 🎤 (transcribed) <text>`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from dataclasses import dataclass, field, replace
from typing import Any

from core.api import Attachment, Chat, Check, Inbound
from core.chat.files import chat_prefix
from core.chat.images import ImagePart, image_part, image_tokens, shrunk_to_tokens
from core.chat.voice import transcribe
from core.config import Config
from core.errors import ImageRejected, TranscriptionFailed
from core.storage.file_store import FileStore

logger = logging.getLogger(__name__)

MEDIA_DIR = "media"
TRANSCRIBED = "🎤 (transcribed)"
# A stored file's name starts with a letter or digit: a placeholder a user types cannot
# name `..` or anything outside the chat's own media/ folder.
PLACEHOLDER = re.compile(
    r"\[(image|voice|audio) file=(media/[A-Za-z0-9][A-Za-z0-9._-]*)(?: (\d+)s)?\]"
)
NOT_KEPT = re.compile(r"\[(image|voice|audio) not kept: ([^\]]*)\]")
NO_VISION_MARK = f"{MEDIA_DIR}/no-vision-told.txt"
NO_VISION = (
    "(This model cannot see images, so I only got your words. To send images, use a "
    'vision model, or set [media] vision = "on" if this one can.)'
)
IMAGES_LEFT_OUT = (
    "(Your image did not fit in what this model can read at once, so I only got your words.)"
)
NO_VISION_NO_TEXT = "This model cannot see images; please describe it or add a caption."
VISION_NAMES = (
    "gpt-4o", "gpt-4.1", "gpt-5", "o3", "o4", "claude", "gemini", "llava", "bakllava",
    "vision", "-vl", "vl-", "pixtral", "gemma3", "gemma-3", "minicpm-v", "moondream",
    "llama4", "mistral-small3", "qwen2.5vl", "qwen3vl", "internvl", "smolvlm", "granite3.2-vision",
)  # fmt: skip
SUFFIXES = {
    "image/jpeg": ".jpg", "image/png": ".png", "image/webp": ".webp", "image/gif": ".gif",
    "audio/ogg": ".ogg", "audio/mpeg": ".mp3", "audio/mp4": ".m4a", "audio/x-m4a": ".m4a",
    "audio/wav": ".wav", "audio/x-wav": ".wav", "audio/webm": ".webm", "audio/flac": ".flac",
}  # fmt: skip
MIME_OF = {suffix: mime for mime, suffix in SUFFIXES.items()}
# What servers say when a model gets an image it cannot take (llama.cpp without an mmproj,
# vLLM's text models, servers that want string contents).
REFUSED_IMAGE_HINTS = (
    "image", "vision", "multimodal", "multi-modal", "mmproj", "valid string", "must be a string",
)  # fmt: skip


@dataclass
class MediaTurn:
    """What a turn makes of its message's media."""

    text: str  # the user message as the history keeps it (transcripts in, no bytes)
    images: dict[str, ImagePart] = field(default_factory=dict)  # placeholder → image part
    refusal: str = ""  # answer this instead of asking the model (the message is kept)
    notice: str = ""  # say this before the model's answer
    no_vision: bool = False  # images were left out: the model cannot see them


def keep_attachments(files: FileStore, chat: Chat, inbound: Inbound) -> Inbound:
    """`inbound` with each attachment's bytes kept under the chat's `media/` and named by a
    placeholder before the caption; the bytes leave the message."""
    if not inbound.attachments:
        return inbound
    marks = [_keep(files, chat, attachment) for attachment in inbound.attachments]
    text = " ".join([*marks, inbound.text.strip()]).strip()
    return replace(inbound, text=text, attachments=())


def _keep(files: FileStore, chat: Chat, attachment: Attachment) -> str:
    if not attachment.data:
        reason = (attachment.error or "the file was empty").replace("]", ")")
        return f"[{attachment.kind} not kept: {reason}]"
    digest = hashlib.sha256(attachment.data).hexdigest()[:24]
    name = f"{MEDIA_DIR}/{digest}{_suffix(attachment)}"
    files.write_bytes(f"{chat_prefix(chat)}/{name}", attachment.data)
    seconds = f" {round(attachment.duration_s)}s" if attachment.duration_s is not None else ""
    return f"[{attachment.kind} file={name}{seconds}]"


def _suffix(attachment: Attachment) -> str:
    mime = attachment.mime.split(";")[0].strip().lower()
    if mime in SUFFIXES:
        return SUFFIXES[mime]
    suffix = (
        "." + attachment.filename.rsplit(".", 1)[-1].lower() if "." in attachment.filename else ""
    )
    if re.fullmatch(r"\.[a-z0-9]{1,5}", suffix):
        return ".ogg" if suffix == ".oga" else suffix  # Telegram's .oga is Ogg (servers want .ogg)
    return ".jpg" if attachment.kind == "image" else ".ogg"


def sees_images(config: Config, profile_vision: bool | None, model: str) -> bool:
    """Whether `model` gets image parts: `[media] vision`, else its profile, else its name."""
    if config.media.vision != "auto":
        return config.media.vision == "on"
    if profile_vision is not None:
        return profile_vision
    name = model.lower().rsplit("/", 1)[-1]
    return any(hint in name for hint in VISION_NAMES)


def refuses_images(exc: Exception) -> bool:
    """True when a server's error says the model cannot take image parts."""
    said = str(exc).lower()
    return any(hint in said for hint in REFUSED_IMAGE_HINTS)


def media_checks(config: Config, profile_vision: bool | None) -> list[Check]:
    """`mnemo doctor`'s lines: whether the model sees images, whether voice is transcribed."""
    model = config.llm.model
    sees = sees_images(config, profile_vision, model)
    why = (
        f"[media] vision = {config.media.vision!r}"
        if config.media.vision != "auto"
        else "its profile"
        if profile_vision is not None
        else "its name"
    )
    images = f"{model} {'sees images' if sees else 'is text-only: images reach it as captions'}"
    media = config.media
    voice = (
        f"transcribed by {media.transcription_url} ({media.transcription_model})"
        if media.transcription_url
        else "not transcribed (set [media] transcription_url, docs/channels.md#voice)"
    )
    return [Check("images", True, f"{images} (by {why})"), Check("voice", True, voice)]


def has_media(text: str) -> bool:
    return PLACEHOLDER.search(text) is not None or NOT_KEPT.search(text) is not None


async def prepare_media(
    config: Config, files: FileStore, chat: Chat, text: str, vision: bool
) -> MediaTurn:
    """The turn's media: images made into parts (when `vision`), voice notes transcribed.
    A problem (a damaged image, a failed transcription) becomes `refusal`, for the user."""
    turn = MediaTurn(text)
    problems = [
        f"your {kind} could not be kept: {reason}" for kind, reason in NOT_KEPT.findall(text)
    ]
    for match in PLACEHOLDER.finditer(text):
        kind, name, seconds = match.group(1), match.group(2), match.group(3)
        data = files.read_bytes(f"{chat_prefix(chat)}/{name}")
        if data is None:
            problems.append(f"the {kind} {name} is no longer stored")
        elif kind == "image":
            problem = await _add_image(config, turn, match.group(0), data, vision)
            problems += [problem] if problem else []
        else:
            duration = float(seconds) if seconds else None
            problem = await _add_transcript(config, turn, match.group(0), data, name, duration)
            problems += [problem] if problem else []
    if problems:
        turn.refusal = f"Sorry, {'; '.join(problems)}. Your message is saved."
    elif turn.no_vision and not caption_of(turn.text):
        turn.refusal = NO_VISION_NO_TEXT
    return turn


async def _add_image(config: Config, turn: MediaTurn, mark: str, data: bytes, vision: bool) -> str:
    if not vision:
        turn.no_vision = True
        return ""
    try:
        turn.images[mark] = await asyncio.to_thread(image_part, data, config.media)
    except ImageRejected as exc:
        logger.info("image refused: %s", exc)
        return f"I could not use your image: {exc}"
    return ""


async def _add_transcript(
    config: Config, turn: MediaTurn, mark: str, data: bytes, name: str, duration: float | None
) -> str:
    mime = MIME_OF.get("." + name.rsplit(".", 1)[-1], "application/octet-stream")
    try:
        text = await transcribe(config.media, data, name.rsplit("/", 1)[-1], mime, duration)
    except TranscriptionFailed as exc:
        logger.info("voice message not transcribed: %s", exc)
        return f"I could not transcribe your voice message: {exc} (the recording is kept as {name})"
    turn.text = turn.text.replace(mark, f"{mark} {TRANSCRIBED} {text}", 1)
    return ""


def caption_of(text: str) -> str:
    """`text` without its media placeholders: what the user wrote (or said)."""
    return NOT_KEPT.sub("", PLACEHOLDER.sub("", text)).strip()


def claim_no_vision_notice(files: FileStore, chat: Chat) -> bool:
    """True the first time in `chat` (the user is then told the model cannot see images);
    remembered in the chat's files, so it holds across restarts and machines."""
    path = f"{chat_prefix(chat)}/{NO_VISION_MARK}"
    if files.read_text(path) is not None:
        return False
    files.write_text(path, "told: this model cannot see images\n")
    return True


def planned_image_tokens(config: Config, media: MediaTurn | None) -> list[int]:
    """What each of the turn's images costs the model, as its requests are planned."""
    if media is None:
        return []
    return [image_tokens(part, config.media.image_tokens) for part in media.images.values()]


async def fit_images(config: Config, media: MediaTurn, room: int) -> None:
    """Shrink the turn's images so that together they cost at most `room` tokens (re-encoded
    smaller, in a worker thread). When they cannot (a fixed cost per image, or too little
    room), they are left out and the reply says so: a request never goes over the window."""
    share = room // max(1, len(media.images))
    fitted: dict[str, ImagePart] = {}
    if not config.media.image_tokens:
        for mark, part in media.images.items():
            smaller = await asyncio.to_thread(shrunk_to_tokens, part, share, config.media)
            if smaller is None:
                break
            fitted[mark] = smaller
    if fitted and len(fitted) == len(media.images):
        media.images.update(fitted)
        return
    logger.info("%d images left out: %d tokens of room", len(media.images), room)
    media.images.clear()
    media.notice = IMAGES_LEFT_OUT


def with_images(
    messages: list[dict[str, Any]], images: dict[str, ImagePart]
) -> list[dict[str, Any]]:
    """`messages` with each image attached, as an image part, to the last user message that
    names it (the turn's own message; the history keeps only the placeholder)."""
    if not images:
        return messages
    attached = list(messages)
    for index in range(len(attached) - 1, -1, -1):
        entry = attached[index]
        content = entry.get("content")
        if entry.get("role") != "user" or not isinstance(content, str):
            continue
        named = [part for mark, part in images.items() if mark in content]
        if named:
            parts = [{"type": "text", "text": content}, *(part.to_openai() for part in named)]
            attached[index] = {**entry, "content": parts}
            return attached
    return messages


def image_bytes_in(texts: list[str]) -> int:
    """How many characters of inline image data (`data:image/…;base64,`) `texts` hold: what
    the stored history must never carry (0)."""
    pattern = re.compile(r"data:image/[a-z+.-]+;base64,[A-Za-z0-9+/=]+")
    return sum(len(found) for text in texts for found in pattern.findall(text))
