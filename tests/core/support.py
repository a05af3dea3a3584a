"""Shared helpers of the core tests: a runtime with only the built-ins (no embedder to load)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from bots.runtime import Runtime, build_runtime
from core import plugin as default_plugin
from core.config import Config
from core.turn.dispatcher import Dispatcher


def light_runtime(config: Config) -> Runtime:
    """Like `build_runtime()` but with the built-ins only, so tests see only the core's requests."""
    return build_runtime(config, plugins=[default_plugin])


@contextlib.asynccontextmanager
async def dispatching_runtime(config: Config) -> AsyncIterator[Runtime]:
    """A `light_runtime` whose dispatcher retries a failed send once, after 10 ms; its
    dispatcher stopped and the runtime closed afterwards."""
    runtime = light_runtime(config)
    runtime.dispatcher = Dispatcher(runtime.agent, retry_delays_s=(0.01,))
    try:
        yield runtime
    finally:
        await runtime.dispatcher.stop()
        runtime.close()


def stored(runtime: Runtime, chat_id: str) -> list[tuple[str, str]]:
    """(role, content) of the terminal chat's current session, oldest first."""
    chat = runtime.store.find_chat("terminal", chat_id)
    assert chat is not None
    return [(m.role, m.content) for m in runtime.store.history(chat.id)]
