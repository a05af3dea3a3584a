"""Shared helpers of the context tests: a runtime without extensions (no embedder to load)."""

from __future__ import annotations

from bots.runtime import Runtime
from core.config import Config
from core.db import connect
from core.dispatcher import Dispatcher
from core.llm import OpenAILLM
from core.store import SessionStore
from core.turn import Agent


def light_runtime(config: Config) -> Runtime:
    """Like `build_runtime()` but with no extensions, so tests see only the core's requests."""
    conn = connect(config.storage.database_path)
    store = SessionStore(conn)
    llm = OpenAILLM(config.llm)
    agent = Agent(config, store, llm, extensions=[])
    return Runtime(config, conn, store, llm, agent, Dispatcher(agent.handle))
