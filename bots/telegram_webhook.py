"""The Telegram webhook server: updates POSTed by Telegram, answered once they are stored.

Any number of `mnemo run` processes can serve one webhook path behind a load balancer:
each stores what it receives in the shared inbox (the unique platform message id makes a
redelivered update a no-op), and the per-chat turn lease lets one process at a time answer
a chat. A POST is answered only after its message is stored, so an update lost to a crash
or a failed write is sent again by Telegram; an update that cannot be parsed gets a 200
and one log line, as polling skips it (`bots.telegram_updates`), or Telegram would send it
forever.

The server is aiohttp's (`web.AppRunner` + `TCPSite` inside our own loop): it installs no
signal handlers (`mnemo run` owns SIGTERM and its 5 s graceful stop), and it is already
installed (discord.py depends on it). python-telegram-bot's own webhook server answers 200
as soon as an update is queued, before any handler stored it, which is the one thing a
load-balanced webhook must not do.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web
from telegram import Bot, Update
from telegram.error import TelegramError

from bots.telegram_updates import SHOWN_CHARS, readable_update
from core.config import TelegramConfig
from core.errors import StorageError

logger = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
HEALTH_PATH = "/healthz"
SHUTDOWN_TIMEOUT_S = 1.0  # a POST only stores a message: in flight for milliseconds
MAX_BODY_BYTES = 1 << 20

UpdateReceiver = Callable[[Update], Awaitable[None]]


class NotStored(StorageError):
    """The update's message could not be stored: Telegram is told to send it again."""


class TelegramWebhook:
    """Serves `config.served_path` (and `/healthz`) on `listen_host:listen_port` while
    inside `serving()`; every update that parses goes to `receive`, awaited before the
    answer."""

    def __init__(self, config: TelegramConfig, bot: Bot, receive: UpdateReceiver) -> None:
        self.config = config
        self.bot = bot
        self.receive = receive

    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post(self.config.served_path, self._post)
        app.router.add_get(HEALTH_PATH, _healthy)
        return app

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Listen while inside. Leaving stops listening; the webhook stays registered at
        Telegram (other instances still serve it)."""
        runner = web.AppRunner(
            self.application(), shutdown_timeout=SHUTDOWN_TIMEOUT_S, access_log=None
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.config.listen_host, self.config.listen_port)
            await site.start()
            yield
        finally:
            await runner.cleanup()

    async def _post(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER)
        if given is None:
            return web.Response(status=401, text="secret token missing")
        if not secrets.compare_digest(given.encode(), self.config.webhook_secret.encode()):
            return web.Response(status=403, text="wrong secret token")
        update = parse_update(await request.read(), self.bot)
        if update is None:
            return web.Response(text="skipped")
        try:
            await self.receive(update)
        except NotStored as exc:
            logger.warning("update %d not stored (%s); Telegram sends it again",
                           update.update_id, exc.__cause__ or exc)  # fmt: skip
            return web.Response(status=503, text="not stored; send it again")
        except Exception:  # one failing update must not be sent again and again
            logger.exception("update %d failed (the other updates go on)", update.update_id)
        return web.Response(text="ok")


async def _healthy(request: web.Request) -> web.Response:
    """For a load balancer's health check: this process serves the webhook."""
    return web.Response(text="ok")


def parse_update(body: bytes, bot: Bot) -> Update | None:
    """The update in a webhook body; None (logged once) when there is none to handle. An
    update with a field that does not parse is reduced to its bare id, as in polling."""
    try:
        raw = readable_update(json.loads(body))
    except (ValueError, TelegramError) as exc:
        logger.warning("skipped a webhook request that is no update: %s", str(exc)[:SHOWN_CHARS])
        return None
    update = Update.de_json(raw, bot)
    return update if update.message is not None else None
