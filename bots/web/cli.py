"""`mnemo web`: the dashboard alone (no channels, no reflector schedule) on the database of
the configuration, until Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import TYPE_CHECKING

import click

from core.cli.runtime import Runtime, current_source

if TYPE_CHECKING:
    from bots.web.extension import WebExtension


@click.command("web")
@click.option("--host", default=None, help="Address to bind (default: [web] host, 127.0.0.1).")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Port (default: [web] port, 8765; 0: any free one).",
)
def web_command(host: str | None, port: int | None) -> None:
    """Serve the operator's dashboard: chats, memories, context, pictures, health."""
    runtime = current_source().runtime()
    try:
        asyncio.run(_serve(runtime, host, port))
    finally:
        runtime.close()


async def _serve(runtime: Runtime, host: str | None, port: int | None) -> None:
    from bots.web.extension import WebExtension

    await runtime.start()  # the embedding model: recall ranks as a turn does
    extension = next(e for e in runtime.extensions if isinstance(e, WebExtension))
    _open_chat(runtime, extension)
    service = extension.service(host, port)
    try:
        url = service.bind()
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {service.host}:{service.port}: {exc}"
        ) from None
    extension.announce(url, service.host)
    click.echo(f"dashboard: {url}/ (Ctrl-C to stop)", err=True)
    task = asyncio.create_task(service.run(), name="web")
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, task.cancel)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


def _open_chat(runtime: Runtime, extension: WebExtension) -> None:
    """The chat page answers through this process's dispatcher (`web:<name>` chats)."""
    from bots.runtime import Runtime as BotRuntime

    if isinstance(runtime, BotRuntime):
        channel = extension.chat_channel()
        runtime.dispatcher.attach(channel)
        channel.bind(runtime.dispatcher)
