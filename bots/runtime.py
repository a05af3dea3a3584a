"""The composition root: config → database, store, model client, and the agent with every
plugin's extension (the built-ins, memory, learned strategies, the reflector)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from bots.plugins import PLUGINS
from core.config import Config
from core.context.plan import RequestPlanner
from core.model.client import OpenAILLM
from core.model.discovery import discover
from core.storage.database import sqlite_connection
from core.storage.db import Connection
from core.storage.engine import Storage, open_storage
from core.storage.store import DeliveryStore, SessionStore
from core.storage.stores import file_store, session_store
from core.turn.agent import Agent
from core.turn.assembly import build_agent
from core.turn.dispatcher import Dispatcher
from core.turn.extensions import Extensions
from core.turn.hooks import Plugin

logger = logging.getLogger(__name__)


@dataclass
class Runtime:
    config: Config
    storage: Storage
    store: SessionStore
    llm: OpenAILLM
    agent: Agent
    dispatcher: Dispatcher

    @property
    def conn(self) -> Connection:
        """The SQLite connection (SQLite-only tools and tests)."""
        return sqlite_connection(self.storage.database)

    @property
    def extensions(self) -> Extensions:
        return self.agent.extensions

    @property
    def planner(self) -> RequestPlanner:
        return self.agent.planner

    @property
    def deliveries(self) -> DeliveryStore:
        return self.agent.deliveries

    async def start(self) -> None:
        """Ask the model server about its model, and let every extension prepare (load
        models) before the first message."""
        await self.discover_models()
        await self.agent.extensions.start()

    async def discover_models(self) -> None:
        """Learn the window of the chat model (and the reflector's) from the server, where
        it can tell; a server that cannot is fine (the first overflow error will)."""
        models = {self.llm.model, self.config.reflector.model or self.llm.model}
        for model in sorted(models):
            try:
                await discover(self.llm.client(), self.store, self.config.llm, model)
            except Exception as exc:  # a probe must never stop the bot from starting
                logger.debug("could not ask the server about %s: %s", model, exc)

    def close(self) -> None:
        self.storage.close()


def build_runtime(config: Config, plugins: Sequence[Plugin] = PLUGINS) -> Runtime:
    storage = open_storage(config.storage)
    try:
        store = session_store(storage)
        llm = OpenAILLM(config.llm)
        files = file_store(storage, config.storage.data_dir)
        agent = build_agent(config, storage, store, llm, plugins, files=files)
    except BaseException:
        storage.close()
        raise
    return Runtime(config, storage, store, llm, agent, Dispatcher(agent))
