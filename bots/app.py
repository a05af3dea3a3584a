"""`mnemo run`: every enabled channel and background service in one asyncio loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Iterator
from typing import Any

from bots.runtime import Runtime
from bots.terminal import TerminalChannel
from core.api import Channel, Service
from core.errors import DatabaseGone
from core.storage.engine import Storage
from core.turn.dispatcher import SHUTDOWN_GRACE_S, Dispatcher

logger = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
FILE_CHECK_S = 2.0  # how often the database file is checked to be the one opened


def enabled_channels(runtime: Runtime) -> list[Channel]:
    """Channels to start: those enabled with their token set, and the terminal if wanted."""
    config = runtime.config
    channels: list[Channel] = []
    commands = runtime.extensions.command_list()
    download = config.media.max_download_bytes  # photos and voice notes fetched up to this
    if config.telegram.enabled and config.telegram.token:
        from bots.telegram import TelegramChannel

        channels.append(TelegramChannel(config.telegram, commands, download))
    if config.discord.enabled and config.discord.token:
        from bots.discord_bot import DiscordChannel

        channels.append(DiscordChannel(config.discord, commands, runtime.store.find_chat, download))
    if config.web.enabled:  # the dashboard's chat page is a channel too
        from bots.web.extension import WebExtension

        for extension in runtime.extensions:
            if isinstance(extension, WebExtension):
                channels.append(extension.chat_channel())
    terminal = config.terminal.enabled
    if terminal is None:
        terminal = sys.stdin.isatty()
    if terminal:
        channels.append(
            TerminalChannel(config.terminal.chat_id, streaming=config.terminal.streaming)
        )
    return channels


async def _guard(name: str, work: Awaitable[None]) -> None:
    """Run a channel or service; a failure is reported and does not stop the others."""
    try:
        await work
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("%s stopped with an error; the other channels keep running", name)
    else:
        logger.info("%s finished", name)


async def _run_channel(channel: Channel, dispatcher: Dispatcher) -> None:
    """Run `channel` with the dispatcher as its handler; once it ends (or fails), its
    chats' replies are no longer sent through it."""
    try:
        await _guard(f"channel {channel.name}", channel.run(dispatcher))
    finally:
        dispatcher.detach(channel)


async def _watch_file(storage: Storage, stop: asyncio.Event, every_s: float) -> DatabaseGone:
    """Check every `every_s` that the database file is still the one opened; when it was
    deleted or replaced, say so and stop the platform (and return the error)."""
    while True:
        try:
            storage.check_file()
        except DatabaseGone as exc:
            logger.error("%s", exc)
            stop.set()
            return exc
        await asyncio.sleep(every_s)


async def run_platform(
    runtime: Runtime,
    channels: list[Channel],
    services: list[Service] | None = None,
    *,
    grace_s: float = SHUTDOWN_GRACE_S,
    file_check_s: float = FILE_CHECK_S,
) -> None:
    """Run until every channel has ended or SIGINT/SIGTERM arrives, then shut down cleanly.

    Replies go out through the channels (attached to the dispatcher), and what an earlier
    run left (messages not answered, replies not delivered) is taken up first. On the
    way out no new turn starts, running ones get `grace_s` to finish, and every message
    not answered stays stored for the next start. A database file deleted or replaced
    under the process stops it too, with `DatabaseGone` raised at the end.
    """
    services = services if services is not None else runtime.extensions.services()
    dispatcher = runtime.dispatcher
    stop = asyncio.Event()
    for channel in channels:
        dispatcher.attach(channel)
    channel_tasks = [
        asyncio.create_task(_run_channel(c, dispatcher), name=c.name) for c in channels
    ]
    service_tasks = [
        asyncio.create_task(_guard(f"service {s.name}", s.run()), name=s.name) for s in services
    ]
    sweeper = asyncio.create_task(_guard("leftover sweep", dispatcher.sweep()), name="sweep")
    logger.info(
        "running channels: %s; services: %s",
        ", ".join(c.name for c in channels) or "none",
        ", ".join(s.name for s in services) or "none",
    )
    stopper = asyncio.create_task(stop.wait())
    watcher = asyncio.create_task(_watch_file(runtime.storage, stop, file_check_s), name="file")
    with _stopped_by_signals(stop):
        try:
            await _until_stopped_or_channels_end(stopper, channel_tasks)
        finally:
            await _shut_down(dispatcher, grace_s, sweeper, [*channel_tasks, *service_tasks])
            for task in (stopper, watcher):
                task.cancel()
            await asyncio.gather(stopper, watcher, return_exceptions=True)
    logger.info("stopped")
    if watcher.done() and not watcher.cancelled() and watcher.exception() is None:
        raise watcher.result()  # `mnemo run` ends with the reason, not silently


async def _shut_down(
    dispatcher: Dispatcher,
    grace_s: float,
    sweeper: asyncio.Task[None],
    tasks: list[asyncio.Task[None]],
) -> None:
    """No new turn; running ones get `grace_s` while the channels still send; then every
    channel and service is cancelled."""
    logger.info("shutting down")
    sweeper.cancel()
    await dispatcher.stop(grace_s)  # the channels still run: replies can go out
    for task in (*tasks, sweeper):
        task.cancel()
    await asyncio.gather(*tasks, sweeper, return_exceptions=True)


@contextlib.contextmanager
def _stopped_by_signals(stop: asyncio.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set `stop` while inside (not in a thread other than the main one)."""
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(sig, stop.set)
    try:
        yield
    finally:
        for sig in STOP_SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


async def _until_stopped_or_channels_end(
    stopper: asyncio.Task[bool], channel_tasks: list[asyncio.Task[None]]
) -> None:
    """Wait for `stopper`, or for every channel to end when there are channels (services
    alone run until stopped)."""
    waiting: set[asyncio.Task[Any]] = {stopper, *channel_tasks}
    while True:
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        waiting -= done
        if stopper in done or (channel_tasks and waiting == {stopper}):
            return
