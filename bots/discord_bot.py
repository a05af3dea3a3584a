"""The Discord channel: a discord.py client started with `client.start()` inside our loop.

DMs and guild text channels; a thread is its own session (`"<parent>:<thread>"`).
Every chat command is a slash command (`bots.discord_commands`, synced at start); `!`
prefix commands (`!reset` reaches the core as `/reset`) also work where the bot can read
the message. Without the privileged *Message Content* intent (`[discord]
message_content_intent`, off by default) the bot still reads DMs and the guild messages
that mention it or reply to it; the intent is needed for `reply_in_guilds = "all"`, for
guild chatter kept as context and for `!` commands that do not mention the bot.

With `[discord] shard_count` (and `shard_ids`), the client is discord.py's
`AutoShardedClient` running those shards, so N processes split the guilds between them;
Discord routes each guild to shard `(guild_id >> 22) % shard_count`, and DMs to shard 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import discord

from bots.discord_access import (
    CHANNEL,
    guild_chat_key,
    interaction_inbound,
    is_moderator,
    place_allowed,
)
from bots.discord_commands import (
    DEFER_AFTER_S,
    INTERACTION_PREFIX,
    InteractionReply,
    build_tree,
    sync_tree,
)
from bots.discord_media import with_media
from bots.discord_stream import DiscordStreams
from bots.message_split import split_message
from core.api import Chat, ChatKind, Command, Handler, Inbound, Outbound
from core.config import DiscordConfig

logger = logging.getLogger(__name__)

DISCORD_LIMIT = 2000
STARTUP_WAIT_S = 60.0
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".heic")
USER_MENTION = re.compile(r"<@!?(\d+)>")
REFUSAL = (
    "Sorry, this bot is private. Your Discord user id is {user_id}; the owner can add it "
    "to [discord] allowed_user_ids."
)
Destination = discord.abc.Messageable
FindChat = Callable[[str, str], Chat | None]


class _MessageEvents:
    """The events Mnemo listens to, for the plain and the sharded client alike."""

    user: discord.ClientUser | None
    guilds: Sequence[discord.Guild]
    _message_callback: Callable[[discord.Message], Awaitable[None]]
    setup_callback: Callable[[], Awaitable[None]] | None = None

    async def setup_hook(self) -> None:
        """After login, before the gateway: the channel syncs its slash commands here."""
        if self.setup_callback is not None:
            await self.setup_callback()

    async def on_ready(self) -> None:
        logger.info("connected as %s (%d guilds)", self.user, len(self.guilds))

    async def on_message(self, message: discord.Message) -> None:
        await self._message_callback(message)


class MnemoDiscordClient(_MessageEvents, discord.Client):
    """A plain client (no discord.ext.commands): every message goes to one callback."""

    def __init__(
        self, on_message: Callable[[discord.Message], Awaitable[None]], content_intent: bool
    ) -> None:
        super().__init__(**_client_options(content_intent))
        self._message_callback = on_message


class ShardedMnemoDiscordClient(_MessageEvents, discord.AutoShardedClient):
    """The same client running `shard_ids` of `shard_count` shards (all of them when
    `shard_ids` is empty); other processes run the rest."""

    def __init__(
        self,
        on_message: Callable[[discord.Message], Awaitable[None]],
        shard_count: int,
        shard_ids: list[int],
        content_intent: bool,
    ) -> None:
        options = _client_options(content_intent)
        if shard_ids:  # else every shard runs here
            options["shard_ids"] = shard_ids
        super().__init__(shard_count=shard_count, **options)
        self._message_callback = on_message

    async def on_ready(self) -> None:
        shards = sorted(self.shards)
        logger.info("connected as %s: shards %s of %s (%d guilds)", self.user, shards,
                    self.shard_count, len(self.guilds))  # fmt: skip


def _client_options(content_intent: bool) -> dict[str, Any]:
    intents = discord.Intents.default()  # DMs, guild messages; mentions carry their content
    intents.message_content = content_intent  # privileged: enable it in the Developer Portal
    # The model's text never pings anyone (no @everyone, roles or users).
    return {"intents": intents, "allowed_mentions": discord.AllowedMentions.none()}


def build_client(
    config: DiscordConfig, on_message: Callable[[discord.Message], Awaitable[None]]
) -> discord.Client:
    """The sharded client when `shard_count` is set, else the plain one."""
    intent = config.message_content_intent
    if config.shard_count is None:
        return MnemoDiscordClient(on_message, intent)
    return ShardedMnemoDiscordClient(on_message, config.shard_count, config.shard_ids, intent)


class DiscordChannel:
    """A `core.api.Channel` for Discord DMs, guild channels and threads."""

    name = "discord"

    def __init__(
        self,
        config: DiscordConfig,
        commands: list[Command],
        find_chat: FindChat | None = None,
        max_download_bytes: int = 20_000_000,
    ) -> None:
        self.config = config
        self.max_download_bytes = max_download_bytes  # `[media] max_download_bytes`
        self.command_names = {command.name for command in commands}
        self.client = build_client(config, self._on_message)
        self.find_chat = find_chat  # for autocomplete (a chat's memories); None: no suggestions
        self.tree = build_tree(self.client, commands, self._run_slash, self._suggest)
        self._interactions: dict[str, InteractionReply] = {}  # by Inbound.message_id
        self.defer_after_s = DEFER_AFTER_S  # a slower answer shows "thinking…" first
        if config.slash_commands:
            self.client.setup_callback = self.sync_commands  # type: ignore[attr-defined]
        if config.reply_in_guilds == "all" and not config.message_content_intent:
            logger.warning("[discord] reply_in_guilds = \"all\" needs message_content_intent ="
                           " true (and the intent on in the Developer Portal); without it the"
                           " bot reads only mentions, replies to it and DMs")  # fmt: skip
        self._handler: Handler | None = None
        self._destinations: dict[str, Destination] = {}
        self._refused: set[int] = set()
        self.streaming = config.streaming
        self.streams = DiscordStreams(config.stream_interval_s)

    def bind(self, handler: Handler) -> discord.Client:
        """Attach the core's handler (tests then drive `self.client` without a gateway)."""
        self._handler = handler
        return self.client

    async def run(self, handler: Handler) -> None:
        """Connect and serve until cancelled; discord.py reconnects with backoff on its own."""
        self.bind(handler)
        async with self.client:
            await self.client.start(self.config.token)

    async def sync_commands(self) -> None:
        await sync_tree(self.tree, self.config.command_guild_id)

    # --- slash commands ----------------------------------------------------------------

    async def _run_slash(
        self, interaction: discord.Interaction, command: Command, args: str
    ) -> None:
        """`/name args` through the core; the reply answers the interaction (in `send`)."""
        inbound = interaction_inbound(self.config, interaction, f"/{command.name} {args}".strip())
        if self._handler is None or inbound is None:
            refusal = REFUSAL.format(user_id=interaction.user.id)
            await interaction.response.send_message(refusal, ephemeral=True)
            return
        if isinstance(interaction.channel, discord.abc.Messageable):
            self._destinations[inbound.chat_id] = interaction.channel
        reply = InteractionReply(interaction, command.private, self.defer_after_s)
        self._interactions[inbound.message_id] = reply
        try:
            await reply.answered_by(self._answer(inbound))
        finally:
            self._interactions.pop(inbound.message_id, None)

    async def _answer(self, inbound: Inbound) -> None:
        assert self._handler is not None
        reply = await self._handler(inbound)
        if reply is not None:
            await self.send(reply)

    def _suggest(
        self, interaction: discord.Interaction, command: Command, typed: str
    ) -> list[tuple[str, str]]:
        """Autocomplete for `command`'s option in the interaction's chat (none for a user
        or place the bot does not serve)."""
        inbound = interaction_inbound(self.config, interaction, "")
        if command.option is None or command.option.suggest is None or inbound is None:
            return []
        chat = self.find_chat(CHANNEL, inbound.chat_id) if self.find_chat else None
        return [] if chat is None else command.option.suggest(chat, typed)

    # --- inbound ---------------------------------------------------------------------

    async def _on_message(self, message: discord.Message) -> None:
        if self._handler is None or message.author.bot:
            return  # not bound yet, ourselves, or another bot (no bot-to-bot loops)
        try:
            inbound = await self.translate(message)
            if inbound is None:
                return
            inbound = await with_media(message, inbound, self.max_download_bytes)
            self._destinations[inbound.chat_id] = message.channel
            # The core stores it at once, shows `typing` while its turn runs, sends the reply.
            reply = await self._handler(inbound)
            if reply is not None:
                await self.send(reply)
        except Exception:
            logger.exception("message %s failed", message.id)

    async def translate(self, message: discord.Message) -> Inbound | None:
        """The `Inbound` for `message`, or None when it is refused, filtered or empty."""
        text = self.message_text(message)
        if not text:
            return None
        if message.guild is None:
            if not await self._dm_allowed(message):
                return None
            return self._inbound(message, text, str(message.channel.id), "private", True)
        if not self._guild_allowed(message):
            return None
        chat_id, kind = guild_chat_key(message.channel)
        addressed = self._addresses_bot(message, text)
        respond = addressed or self.config.reply_in_guilds == "all"
        users = self.config.allowed_user_ids
        if respond and users and message.author.id not in users:
            # Not stored either: kept, it would be a question left for the model to answer
            # in the next allowed turn. Unaddressed chatter stays as the guild's context.
            logger.info(
                "ignored a message for the bot from user %s in %s (not in allowed_user_ids)",
                message.author.id,
                chat_id,
            )
            return None
        return self._inbound(message, text, chat_id, kind, respond)

    def message_text(self, message: discord.Message) -> str:
        """Mentions made readable (the bot's own removed), `!command` → `/command`, media
        as placeholders (`[image] caption`)."""
        bot_id = self.client.user.id if self.client.user else 0
        names = {user.id: user.display_name for user in message.mentions}

        def mention(match: re.Match[str]) -> str:
            user_id = int(match[1])
            return "" if user_id == bot_id else f"@{names.get(user_id, match[1])}"

        text = USER_MENTION.sub(mention, message.content)
        text = re.sub(r"[ \t]{2,}", " ", text).strip()
        text = self._as_command(text)
        placeholders = [_attachment_placeholder(a) for a in message.attachments]
        placeholders += [f"[sticker {sticker.name}]" for sticker in message.stickers]
        return " ".join([*placeholders, text]).strip()

    def _as_command(self, text: str) -> str:
        prefix = self.config.command_prefix
        rest = text[len(prefix) :]
        if prefix and text.startswith(prefix) and _first_word(rest).lower() in self.command_names:
            return "/" + rest
        return text

    def _addresses_bot(self, message: discord.Message, text: str) -> bool:
        me = self.client.user
        if me is None:
            return False
        if any(user.id == me.id for user in message.mentions):
            return True
        if text.startswith("/") and _first_word(text[1:]).lower() in self.command_names:
            return True
        resolved = message.reference.resolved if message.reference else None
        return isinstance(resolved, discord.Message) and resolved.author.id == me.id

    def _guild_allowed(self, message: discord.Message) -> bool:
        guild_id = message.guild.id if message.guild else None
        return place_allowed(self.config, guild_id, message.channel)

    async def _dm_allowed(self, message: discord.Message) -> bool:
        users = self.config.allowed_user_ids
        author_id = message.author.id
        if not users or author_id in users:
            return True
        logger.info("refused DM from user %s", author_id)
        if author_id not in self._refused:
            self._refused.add(author_id)
            await message.channel.send(REFUSAL.format(user_id=author_id))
        return False

    def _inbound(
        self, message: discord.Message, text: str, chat_id: str, kind: ChatKind, respond: bool
    ) -> Inbound:
        channel = message.channel
        title = ""
        if message.guild is not None:
            title = f"{message.guild.name} #{getattr(channel, 'name', '')}".strip()
        return Inbound(
            channel=CHANNEL,
            chat_id=chat_id,
            text=text,
            sender_id=str(message.author.id),
            sender_name=message.author.display_name,
            chat_kind=kind,
            chat_title=title,
            respond=respond,
            message_id=str(message.id),
            sender_is_admin=is_moderator(message.author),
        )

    @contextlib.asynccontextmanager
    async def typing(self, chat_id: str) -> AsyncIterator[None]:
        """The typing indicator in the chat while the turn runs (renewed by discord.py)."""
        async with contextlib.AsyncExitStack() as indicator:
            try:
                destination = await self._destination(chat_id)
                await indicator.enter_async_context(destination.typing())
            except Exception as exc:  # no indicator is no reason to fail the turn
                logger.debug("typing in %s failed: %s", chat_id, exc)
            yield

    # --- outbound --------------------------------------------------------------------

    async def show_partial(self, message: Outbound) -> None:
        """Show a reply as it grows: one message edited in place, throttled per chat
        (`bots.discord_stream`); never raises."""
        try:
            destination = await self._destination(message.chat_id)
        except Exception as exc:
            logger.debug("no destination for a partial reply in %s: %s", message.chat_id, exc)
            return
        stream = self.streams.open_stream(message, _reference(destination, message))
        await self.streams.show(destination, stream, message.text)

    async def send(self, message: Outbound) -> None:
        """Deliver a reply in parts of at most 2,000 characters; in guilds the first replies.
        A reply shown as it grew takes its final text in the messages that showed it; a
        slash command's reply answers its interaction."""
        if message.reply_to.startswith(INTERACTION_PREFIX):
            await self._answer_interaction(message)
            return
        destination = await self._destination(message.chat_id)
        stream = self.streams.current(message)
        if stream is not None and stream.messages:
            await self.streams.finish(destination, stream, message.text)
            self.streams.close(message)
            return
        reference = _reference(destination, message)
        for index, part in enumerate(split_message(message.text, DISCORD_LIMIT)):
            if index == 0 and reference is not None:
                await destination.send(part, reference=reference)
            else:
                await destination.send(part)
        self.streams.close(message)

    async def _answer_interaction(self, message: Outbound) -> None:
        pending = self._interactions.get(message.reply_to)
        if pending is None:  # its 15 minutes are over (a restart): it cannot be answered
            logger.warning("dropped the reply to %s in %s: the interaction is gone",
                           message.reply_to, message.chat_id)  # fmt: skip
            return
        await pending.send(message.text)

    async def _destination(self, chat_id: str) -> Destination:
        known = self._destinations.get(chat_id)
        if known is not None:
            return known
        channel_id = int(chat_id.rpartition(":")[2])
        # A reply left by an earlier run waits for the connection (TimeoutError after that).
        await asyncio.wait_for(self.client.wait_until_ready(), STARTUP_WAIT_S)
        found = self.client.get_channel(channel_id) or await self.client.fetch_channel(channel_id)
        if not isinstance(found, discord.abc.Messageable):
            raise ValueError(f"discord channel {chat_id} cannot receive messages")
        self._destinations[chat_id] = found
        return found


def _reference(destination: Destination, message: Outbound) -> discord.MessageReference | None:
    """In a guild, a reply quotes the message it answers (in a DM it need not)."""
    if not message.reply_to.isdigit() or isinstance(destination, discord.DMChannel):
        return None
    partial = destination.get_partial_message(int(message.reply_to))  # type: ignore[attr-defined]
    reference: discord.MessageReference = partial.to_reference(fail_if_not_exists=False)
    return reference


def _first_word(text: str) -> str:
    return (text.split(maxsplit=1) or [""])[0]


def _attachment_placeholder(attachment: discord.Attachment) -> str:
    content_type = attachment.content_type or ""
    if content_type.startswith("image/") or attachment.filename.lower().endswith(IMAGE_SUFFIXES):
        return "[image]"
    return f"[file: {attachment.filename}]"
