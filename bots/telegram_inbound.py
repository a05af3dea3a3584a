"""Telegram message → `Inbound`: text or a media placeholder, chat key, and whether it addresses us.

Forum topics get their own chat id (`"<chat>:<thread>"`); media is stored as a short
placeholder such as `[image] caption`, never the bytes.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from telegram import Message, MessageEntity
from telegram.constants import ChatType

from core.api import ChatKind, Inbound

logger = logging.getLogger(__name__)

CHANNEL = "telegram"


@dataclass(frozen=True)
class BotIdentity:
    """Who the bot is on Telegram, learnt from getMe at start-up."""

    id: int
    username: str


def chat_key(message: Message) -> tuple[str, ChatKind]:
    """The chat id the core sees and the kind of chat (a forum topic is its own session)."""
    chat = message.chat
    if chat.type == ChatType.PRIVATE:
        return str(chat.id), "private"
    if chat.type == ChatType.CHANNEL:
        return str(chat.id), "channel"
    if message.is_topic_message and message.message_thread_id:
        return f"{chat.id}:{message.message_thread_id}", "thread"
    return str(chat.id), "group"


def chat_and_topic(chat_id: str) -> tuple[int, int | None]:
    """The Telegram chat and forum topic in a chat id the core knows: `"-100123:42"` →
    (-100123, 42); `"5"` → (5, None)."""
    chat, _, thread = chat_id.partition(":")
    return int(chat), int(thread) if thread else None


def message_text(message: Message) -> str | None:
    """The text to store: the message text, or a placeholder plus caption for media.

    None for service messages (members joining, pinned messages, …) that carry no content,
    and for a message whose text or caption is not a string (Telegram never sends one; a
    broken proxy might): it is skipped with a log line rather than failing the turn.
    """
    for field in ("text", "caption"):
        value = getattr(message, field)
        if value is not None and not isinstance(value, str):
            logger.warning(
                "skipped message %s in chat %s: its %s is not a string but %s",
                message.message_id,
                message.chat.id,
                field,
                type(value).__name__,
            )
            return None
    if message.text:
        return message.text
    placeholder = media_placeholder(message)
    if placeholder is None:
        return None
    caption = (message.caption or "").strip()
    return f"{placeholder} {caption}" if caption else placeholder


def media_placeholder(message: Message) -> str | None:
    """What stands for a message's media in its text (`[image]`, `[voice message]`, …)."""
    if message.photo:
        return "[image]"
    if message.sticker:
        return f"[sticker {message.sticker.emoji or ''}]".replace(" ]", "]")
    if message.animation:
        return "[animation]"
    if message.document:
        return f"[file: {message.document.file_name or 'unnamed'}]"
    if message.voice:
        return "[voice message]"
    if message.audio:
        return f"[audio: {message.audio.title or message.audio.file_name or 'untitled'}]"
    if message.video:
        return "[video]"
    if message.video_note:
        return "[video message]"
    if message.location:
        return f"[location {message.location.latitude:.5f}, {message.location.longitude:.5f}]"
    if message.contact:
        return f"[contact: {message.contact.first_name}]"
    if message.poll:
        return f"[poll: {message.poll.question}]"
    return None


def addresses_bot(message: Message, bot: BotIdentity) -> bool:
    """True when a group message mentions the bot, replies to it, or is a command for it."""
    handle = f"@{bot.username}".lower()
    entities = message.parse_entities() if message.text else message.parse_caption_entities()
    for entity, text in entities.items():
        if entity.type == MessageEntity.MENTION and text.lower() == handle:
            return True
        if entity.type == MessageEntity.TEXT_MENTION and entity.user and entity.user.id == bot.id:
            return True
        if entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0:
            return not for_other_bot(text, bot)
    replied = message.reply_to_message
    # In forum topics every message "replies" to the topic's creation message; that is no reply.
    if replied is not None and replied.forum_topic_created is None:
        return replied.from_user is not None and replied.from_user.id == bot.id
    return False


def for_other_bot(text: str, bot: BotIdentity) -> bool:
    """True for `/command@otherbot`: a command addressed to a different bot in the group."""
    if not text.startswith("/"):
        return False
    target = text.split(maxsplit=1)[0].partition("@")[2].lower()
    return bool(target) and target != bot.username.lower()


def strip_mention(text: str, bot: BotIdentity) -> str:
    """The text without `@botname` (kept as is when the mention is all there is)."""
    stripped = re.sub(rf"@{re.escape(bot.username)}\b", "", text, flags=re.IGNORECASE)
    stripped = re.sub(r"[ \t]{2,}", " ", stripped).strip()
    return stripped or text


def to_inbound(message: Message, text: str, respond: bool) -> Inbound:
    chat_id, kind = chat_key(message)
    sender = message.from_user
    return Inbound(
        channel=CHANNEL,
        chat_id=chat_id,
        text=text,
        sender_id=str(sender.id) if sender else "",
        sender_name=sender_name(message),
        chat_kind=kind,
        chat_title=message.chat.title or "",
        respond=respond,
        message_id=str(message.message_id),
        sender_is_admin=anonymous_admin(message),
    )


def sender_id(message: Message) -> int | None:
    """Who sent `message` for access control: the chat it was sent as (an anonymous admin,
    a linked channel), else the user; None when neither is known."""
    if message.sender_chat is not None:
        return message.sender_chat.id
    return message.from_user.id if message.from_user is not None else None


def anonymous_admin(message: Message) -> bool:
    """A group admin posting as the group itself: only admins can (Telegram sets the
    group as `sender_chat`). Other admins would take a getChatMember call per message."""
    sender_chat = message.sender_chat
    return sender_chat is not None and sender_chat.id == message.chat.id


def sender_name(message: Message) -> str:
    if message.sender_chat is not None:  # an anonymous admin or a linked channel
        return message.sender_chat.title or str(message.sender_chat.id)
    sender = message.from_user
    if sender is not None:
        return sender.full_name or sender.username or str(sender.id)
    return ""
