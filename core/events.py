"""The messages that cross the boundary between channel adapters and the core."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

ChatKind = Literal["private", "group", "channel", "thread"]
MediaKind = Literal["image", "voice", "audio"]


@dataclass(frozen=True)
class Attachment:
    """A photo, voice note or audio file that came with a message, as its adapter fetched it.

    `data` is the file's bytes; empty when the adapter could not fetch it, with `error`
    saying why (too large to download, the platform refused). The core keeps the bytes in
    the chat's files as the message is stored, and the message keeps only a placeholder
    naming the stored file (`core.chat.media`).
    """

    kind: MediaKind
    data: bytes = field(default=b"", repr=False)  # never megabytes in a log line
    mime: str = ""
    filename: str = ""
    duration_s: float | None = None  # voice and audio, when the platform says
    error: str = ""


@dataclass(frozen=True)
class Inbound:
    """One message from a platform, translated by its adapter.

    `chat_id` is the platform's id of the conversation (for a forum topic or thread
    the adapter encodes it, e.g. `"-100123:42"`). `respond` is False for messages the
    core must store but not answer (a group message that does not address the bot).
    `sender_is_admin`: the platform says the sender administers this group (memory lets
    an admin forget any group memory). `sent_at`: when the platform says it was sent, in
    the stored UTC text form (`core.clock.iso_utc`); '' for "now" (a replay of an old
    conversation keeps its dates; only a message answered in the same process keeps it).
    """

    channel: str
    chat_id: str
    text: str
    sender_id: str = ""
    sender_name: str = ""
    chat_kind: ChatKind = "private"
    chat_title: str = ""
    respond: bool = True
    message_id: str = ""
    sender_is_admin: bool = False
    attachments: tuple[Attachment, ...] = ()  # `text` is then the caption (maybe "")
    sent_at: str = ""


@dataclass(frozen=True)
class Outbound:
    """One reply for the adapter to deliver."""

    channel: str
    chat_id: str
    text: str
    reply_to: str = ""
    is_error: bool = False
    meta: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Inbound], Awaitable[Outbound | None]]


@runtime_checkable
class StoreFirst(Protocol):
    """A handler that can say when a message is stored (the core's `Dispatcher`): a webhook
    answers the platform only then, so an update lost before it was stored is sent again."""

    def receive(self, inbound: Inbound) -> asyncio.Future[Outbound | None]:
        """Store `inbound` (raising when it cannot be); the future gives the reply."""
        ...


class Channel(Protocol):
    """A channel adapter: runs until cancelled, feeding inbound messages to `handler`.

    The dispatcher sends replies with `send` (a reply is delivered once it returns; it
    raises when it was not) and shows `typing` while the chat's turn runs.
    """

    name: str

    async def run(self, handler: Handler) -> None: ...

    async def send(self, message: Outbound) -> None: ...

    def typing(self, chat_id: str) -> AbstractAsyncContextManager[None]:
        """A "typing…" indicator in the chat while inside; never raises."""
        ...


@runtime_checkable
class StreamingChannel(Protocol):
    """A channel that can show a reply as it grows (Telegram drafts or edits, the terminal).

    Optional beside `Channel`: a channel without it gets whole replies. `show_partial` gets
    the whole text so far (not a delta) each time it grew, as an `Outbound` addressed like
    the reply; it shows what it can within the platform's limits and never raises. The
    reply itself still comes through `send` with the final text, which replaces what was
    shown (a draft becomes a message; an edited message takes the final text). `streaming`
    is the channel's setting (on by default); when False it gets whole replies only.
    """

    streaming: bool

    async def show_partial(self, message: Outbound) -> None: ...


def streams(channel: object) -> bool:
    """True when `channel` shows replies as they grow and its streaming setting is on."""
    return isinstance(channel, StreamingChannel) and bool(channel.streaming)
