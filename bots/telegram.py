"""The Telegram channel: python-telegram-bot's Application run inside our event loop.

Long polling by default; with `[telegram] mode = "webhook"`, any number of processes serve
one webhook path (`bots.telegram_webhook`). Updates become `Inbound`s (see
`bots.telegram_inbound`), replies go out through `bots.telegram_delivery`.
Access control happens here, before the core sees a message: refused messages cost no
model call and are not stored. Polling skips an update that cannot be parsed
(`bots.telegram_updates`); sends go through python-telegram-bot's rate limiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from telegram import Bot, BotCommand, Message, Update
from telegram.constants import ChatAction, ChatType
from telegram.error import BadRequest, Conflict, NetworkError, TelegramError
from telegram.ext import Application, ContextTypes, MessageHandler, filters
from telegram.request import HTTPXRequest

from bots.telegram_delivery import ReplyRateLimiter, deliver
from bots.telegram_inbound import (
    BotIdentity,
    addresses_bot,
    chat_and_topic,
    for_other_bot,
    message_text,
    sender_id,
    strip_mention,
    to_inbound,
)
from bots.telegram_media import DEFAULT_MAX_DOWNLOAD, with_media
from bots.telegram_stream import TelegramStreams
from bots.telegram_updates import SkippingUpdatesRequest
from core.api import Command, Handler, Inbound, Outbound, StoreFirst
from core.config import TelegramConfig
from core.model.tls import shared_tls_context

logger = logging.getLogger(__name__)

TYPING_INTERVAL_S = 4.0
SEND_POOL_TIMEOUT_S = 15.0
SEND_POOL_SIZE = 256  # PTB's own default for the builder's request
CONCURRENT_UPDATES = 100_000
STARTUP_WAIT_S = 60.0  # how long a reply waits for the channel to start (after a restart)
SET_WEBHOOK_RETRY_S = (1.0, 2.0, 4.0)  # network errors at start (429s: the rate limiter)
COMMAND_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_")
REFUSAL = (
    "Sorry, this bot is private. Your Telegram user id is {user_id}; the owner can add it "
    "to [telegram] allowed_user_ids."
)
PRIVACY_MODE = (
    "privacy mode is on for @%s: in groups Telegram shows it only commands, mentions and "
    "replies to it, so %s. To turn it off: in @BotFather send /setprivacy, pick the bot, "
    "choose Disable, then remove the bot from each group and add it again (or make it a "
    "group admin, which sees everything)"
)


class TelegramChannel:
    """A `core.api.Channel` for Telegram private chats, groups and forum topics."""

    name = "telegram"

    def __init__(
        self,
        config: TelegramConfig,
        commands: list[Command],
        max_download_bytes: int = DEFAULT_MAX_DOWNLOAD,
    ) -> None:
        self.config = config
        self.max_download_bytes = max_download_bytes  # `[media] max_download_bytes`
        self.commands = commands
        self._bot: Bot | None = None
        self._identity: BotIdentity | None = None
        self._refused: set[int] = set()
        self._started = asyncio.Event()  # replies left by an earlier run wait for it
        self._background: set[asyncio.Future[object]] = set()  # a plain handler's webhook work
        self.streaming = config.streaming
        self.streams = TelegramStreams(config.stream_interval_s)

    async def run(self, handler: Handler) -> None:
        """Poll (or serve the webhook) until cancelled; then stop cleanly."""
        app = self._build_application(handler)
        async with app:  # initialize (getMe) … shutdown
            self._bot = app.bot
            self._identity = BotIdentity(app.bot.id, app.bot.username)
            self._started.set()
            await self._register_commands(app.bot)
            self._warn_privacy_mode(app.bot)
            await app.start()
            try:
                if self.config.mode == "webhook":
                    await self._serve_webhook(app.bot, handler)
                else:
                    await self._start_polling(app)
                    await asyncio.Future()  # runs until the platform cancels this channel
            finally:
                if app.updater is not None and app.updater.running:
                    await app.updater.stop()
                await app.stop()
                for work in self._background:
                    work.cancel()
                await asyncio.gather(*self._background, return_exceptions=True)
                self._bot = None
                self._started.clear()

    def _build_application(self, handler: Handler) -> Application:  # type: ignore[type-arg]
        # PTB's clients take the process's one TLS context (`core.model.tls`: the one each
        # would build, certifi's bundle or `SSL_CERT_FILE`), not one each (~20 ms of CPU).
        tls: dict[str, Any] = {"verify": shared_tls_context()}
        # A turn's send waits for a free connection rather than failing after PTB's default
        # 1 s when many chats answer at once (each then retried: slower).
        send_request = HTTPXRequest(
            SEND_POOL_SIZE, pool_timeout=SEND_POOL_TIMEOUT_S, httpx_kwargs=tls
        )
        # PTB builds this one in webhook mode too (the bot's `get_updates`), unused there.
        updates_request = SkippingUpdatesRequest(connection_pool_size=1, httpx_kwargs=tls)
        builder = (
            Application.builder()
            .token(self.config.token)
            .base_url(self.config.api_base_url)
            .base_file_url(self.config.api_file_url)
            # Every update's handler starts at once, so the core stores each message as
            # it arrives (it keeps each chat in order); handlers then wait for their turn.
            .concurrent_updates(CONCURRENT_UPDATES)
            .rate_limiter(ReplyRateLimiter(overall_max_rate=self.config.max_messages_per_second))
            .request(send_request)
            .get_updates_request(updates_request)
        )
        if self.config.mode == "webhook":
            builder = builder.updater(None)  # updates come from our webhook server
        app = builder.build()

        async def on_message(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
            if update.message is not None:
                await self._handle(update.message, handler)

        app.add_handler(MessageHandler(filters.ALL, on_message))
        app.add_error_handler(_log_update_error)
        return app

    async def _start_polling(self, app: Application) -> None:  # type: ignore[type-arg]
        assert app.updater is not None
        await app.updater.start_polling(
            allowed_updates=[Update.MESSAGE],
            bootstrap_retries=3,
            error_callback=_log_polling_error,
        )
        logger.info("polling as @%s", app.bot.username)

    async def _serve_webhook(self, bot: Bot, handler: Handler) -> None:
        """Serve the webhook path until cancelled. Each instance registers the same URL,
        secret and update types at start (idempotent; pending updates are kept), and none
        deletes the webhook on the way out: the other instances still serve it."""
        from bots.telegram_webhook import TelegramWebhook  # aiohttp: only a webhook needs it

        async def receive(update: Update) -> None:
            if update.message is not None:
                await self._receive(update.message, handler)

        webhook = TelegramWebhook(self.config, bot, receive)
        async with webhook.serving():
            await self._set_webhook(bot)
            logger.info("webhook for @%s on %s:%d%s (%s)", bot.username, self.config.listen_host,
                        self.config.listen_port, self.config.served_path,
                        self.config.webhook_url)  # fmt: skip
            await asyncio.Future()  # runs until the platform cancels this channel

    async def _set_webhook(self, bot: Bot) -> None:
        for delay in (*SET_WEBHOOK_RETRY_S, None):
            try:
                await bot.set_webhook(
                    self.config.webhook_url,
                    secret_token=self.config.webhook_secret,
                    allowed_updates=[Update.MESSAGE],
                )
                return
            except NetworkError as exc:
                if isinstance(exc, BadRequest) or delay is None:
                    raise
                logger.warning("setWebhook failed (%s); trying again in %.0f s", exc, delay)
                await asyncio.sleep(delay)

    def _warn_privacy_mode(self, bot: Bot) -> None:
        """Group messages not addressed to the bot are context (and what the reflector learns
        from; with reply_in_groups = "all", what it answers): say so when Telegram hides them."""
        if not bot.can_join_groups or bot.can_read_all_group_messages:
            return
        if self.config.reply_in_groups == "all":
            lost = 'reply_in_groups = "all" cannot answer (or store) any other message'
        else:
            lost = "other group messages are neither stored as context nor learnt from"
        logger.warning(PRIVACY_MODE, bot.username, lost)

    async def _register_commands(self, bot: Bot) -> None:
        valid = [c for c in self.commands if _valid_command_name(c.name)]
        for command in self.commands:
            if command not in valid:
                logger.warning("/%s is not a valid Telegram command name", command.name)
        bot_commands = [BotCommand(c.name, c.description[:256] or c.name) for c in valid]
        try:
            await bot.set_my_commands(bot_commands)
        except TelegramError as exc:
            logger.warning("setMyCommands failed (%s); commands still work", exc)

    # --- inbound ---------------------------------------------------------------------

    async def _handle(self, message: Message, handler: Handler) -> None:
        """One polled message: access check, translate, hand it to the core (which stores it
        at once, shows `typing` while its turn runs and sends the reply)."""
        inbound = await self.translate(message)
        if inbound is None:
            return
        reply = await handler(inbound)
        if reply is not None:
            await self.send(reply)

    async def _receive(self, message: Message, handler: Handler) -> None:
        """One message from the webhook: returns once it is stored (raising `NotStored` when
        it could not be); its turn and reply go on in the background."""
        inbound = await self.translate(message)
        if inbound is None:
            return
        if isinstance(handler, StoreFirst):
            try:
                reply = handler.receive(inbound)
            except Exception as exc:
                from bots.telegram_webhook import NotStored

                raise NotStored(f"{type(exc).__name__}: {exc}") from exc
        else:  # a handler that does not store (tests): the answer is not tied to it
            reply = self._keep(asyncio.ensure_future(handler(inbound)))
        reply.add_done_callback(self._send_later)

    def _keep(self, work: asyncio.Future[Any]) -> asyncio.Future[Any]:
        """Hold a reference until `work` is done (the loop keeps only weak ones)."""
        self._background.add(work)
        work.add_done_callback(self._background.discard)
        return work

    def _send_later(self, reply: asyncio.Future[Outbound | None]) -> None:
        """Send a reply the handler returned (the dispatcher sends its own: None here)."""
        if reply.cancelled():
            return
        if reply.exception() is not None:
            logger.error("a webhook message failed", exc_info=reply.exception())
            return
        outbound = reply.result()
        if outbound is not None:
            self._keep(asyncio.create_task(self._send_logged(outbound), name="telegram-reply"))

    async def _send_logged(self, message: Outbound) -> None:
        try:
            await self.send(message)
        except Exception:
            logger.exception("a reply to %s could not be sent", message.chat_id)

    async def translate(self, message: Message) -> Inbound | None:
        """The `Inbound` for `message`, or None when it is refused or carries nothing."""
        assert self._identity is not None
        text = message_text(message)
        if text is None or message.chat.type == ChatType.CHANNEL:
            return None
        if message.chat.type == ChatType.PRIVATE:
            if not await self._private_allowed(message):
                return None
            inbound = to_inbound(message, text, respond=True)
            return await with_media(message, inbound, self.max_download_bytes)
        if self.config.allowed_chat_ids and message.chat.id not in self.config.allowed_chat_ids:
            logger.debug("ignoring group %s (not in allowed_chat_ids)", message.chat.id)
            return None
        addressed = addresses_bot(message, self._identity)
        respond = addressed or (
            self.config.reply_in_groups == "all" and not for_other_bot(text, self._identity)
        )
        if respond and not self._group_sender_allowed(message):
            # Not stored either: kept, it would be a question left for the model to answer
            # in the next allowed turn. Unaddressed chatter stays as the group's context.
            logger.info(
                "ignored a message for the bot from %s in group %s (not in allowed_user_ids)",
                sender_id(message),
                message.chat.id,
            )
            return None
        if addressed:
            text = strip_mention(text, self._identity)
        inbound = to_inbound(message, text, respond=respond)
        return await with_media(message, inbound, self.max_download_bytes)

    async def _private_allowed(self, message: Message) -> bool:
        """Allowed users pass; anyone else gets one refusal per run that shows their id.

        A private message with no user behind it (no `from`, or sent as a chat) is refused.
        """
        user = message.from_user
        if user is None or message.sender_chat is not None:
            logger.info("refused private message in chat %s: no user sent it", message.chat.id)
            return False
        allowed = self.config.allowed_user_ids
        if not allowed or user.id in allowed:
            return True
        logger.info("refused private message from user %s", user.id)
        if user.id not in self._refused:
            self._refused.add(user.id)
            await message.get_bot().send_message(message.chat.id, REFUSAL.format(user_id=user.id))
        return False

    def _group_sender_allowed(self, message: Message) -> bool:
        """`allowed_user_ids` in groups (unless `allowed_users_in_groups` is off); a message
        sent as a chat (an anonymous admin, a linked channel) counts as that chat's id."""
        allowed = self.config.allowed_user_ids
        if not allowed or not self.config.allowed_users_in_groups:
            return True
        return sender_id(message) in allowed

    @contextlib.asynccontextmanager
    async def typing(self, chat_id: str) -> AsyncIterator[None]:
        """'typing…' in the chat (or topic), renewed every 4 s while the turn runs."""
        bot = self._bot
        if bot is None:
            yield
            return
        chat, thread_id = chat_and_topic(chat_id)
        done = asyncio.Event()

        async def keep_typing() -> None:
            while not done.is_set():
                try:
                    await bot.send_chat_action(chat, ChatAction.TYPING, message_thread_id=thread_id)
                except TelegramError as exc:
                    logger.debug("sendChatAction failed: %s", exc)
                await self.streams.refresh_drafts(bot, chat_id)  # a draft outlives 30 s
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), TYPING_INTERVAL_S)

        task = asyncio.create_task(keep_typing(), name="telegram-typing")
        try:
            yield
        finally:
            # Stopped, not cancelled: a request cancelled in flight can leave its pooled
            # connection half-closed and taken for good (hundreds of them under load
            # stalled every send); the request in flight ends within its own timeouts.
            done.set()
            await task

    # --- outbound --------------------------------------------------------------------

    async def send(self, message: Outbound) -> None:
        """Deliver a reply; in groups the first part quotes the message it answers."""
        if self._bot is None:  # not started yet (a reply left by an earlier run)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._started.wait(), STARTUP_WAIT_S)
        if self._bot is None:
            raise RuntimeError("the Telegram channel is not running")
        chat_id, thread_id = chat_and_topic(message.chat_id)
        stream = self.streams.current(message)
        if stream is not None and not stream.drafting and stream.message_ids:
            await self.streams.finish(self._bot, stream, message.text)  # edits in place
            self.streams.close(message)
            return
        quote = chat_id < 0 and message.reply_to.isdigit()
        await deliver(
            self._bot,
            chat_id,
            message.text,
            thread_id=thread_id,
            reply_to=int(message.reply_to) if quote else None,
        )
        self.streams.close(message)

    async def show_partial(self, message: Outbound) -> None:
        """Show a reply as it grows: a draft in a private chat, an edited message in a
        group (`bots.telegram_stream`), throttled per chat; never raises."""
        if self._bot is None:
            return
        chat_id, thread_id = chat_and_topic(message.chat_id)
        stream = self.streams.open_stream(message, chat_id, thread_id)
        await self.streams.show(self._bot, stream, message.text)


def _valid_command_name(name: str) -> bool:
    return 1 <= len(name) <= 32 and set(name) <= COMMAND_NAME_CHARS


def _log_polling_error(error: TelegramError) -> None:
    """Called by the polling loop, which itself backs off (1 s growing to 30 s) and retries."""
    if isinstance(error, Conflict):
        logger.warning(
            "409 Conflict: another process is polling with this bot token "
            "(stop it or use a webhook); retrying with backoff"
        )
    elif isinstance(error, NetworkError):
        logger.warning("network error while polling (%s); retrying with backoff", error)
    else:
        logger.error("polling failed (%s); retrying with backoff", error)


async def _log_update_error(update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
    """One failing update is logged with its traceback; the others keep being processed."""
    update_id = update.update_id if isinstance(update, Update) else "?"
    logger.error("update %s failed (the other updates go on)", update_id, exc_info=context.error)
