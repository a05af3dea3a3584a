"""Shared helpers of the core tests: a runtime with only the built-ins (no embedder to load)."""

from __future__ import annotations

from bots.runtime import Runtime, build_runtime
from core import plugin as default_plugin
from core.config import Config


def light_runtime(config: Config) -> Runtime:
    """Like `build_runtime()` but with the built-ins only, so tests see only the core's requests."""
    return build_runtime(config, plugins=[default_plugin])


def stored(runtime: Runtime, chat_id: str) -> list[tuple[str, str]]:
    """(role, content) of the terminal chat's current session, oldest first."""
    chat = runtime.store.find_chat("terminal", chat_id)
    assert chat is not None
    return [(m.role, m.content) for m in runtime.store.history(chat.id)]
