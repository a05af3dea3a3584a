"""The composition root: config → database, store, model client, agent with its extensions."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from core.config import Config
from core.db import Connection, connect
from core.dispatcher import Dispatcher
from core.extensions import Extension
from core.llm import OpenAILLM
from core.store import SessionStore
from core.turn import Agent

HTTP_LOGGERS = (
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "openai",
    "telegram",
    "discord",
    "apscheduler",
    "sentence_transformers",
    "urllib3",
)


@dataclass
class Runtime:
    config: Config
    conn: Connection
    store: SessionStore
    llm: OpenAILLM
    agent: Agent
    dispatcher: Dispatcher

    def close(self) -> None:
        self.conn.close()


def build_extensions(config: Config, store: SessionStore, llm: OpenAILLM) -> list[Extension]:
    """The extensions every bot gets (memory, reflector, …), in injection order."""
    from memory.extension import MemoryExtension
    from memory.strategies.extension import StrategyExtension
    from reflector.extension import ReflectorExtension

    extensions: list[Extension] = []
    extensions.append(MemoryExtension(config, store.conn))
    extensions.append(StrategyExtension())
    extensions.append(ReflectorExtension(config, store, llm))
    return extensions


def build_runtime(config: Config) -> Runtime:
    config.storage.data_dir.mkdir(parents=True, exist_ok=True)
    conn = connect(config.storage.database_path)
    store = SessionStore(conn)
    llm = OpenAILLM(config.llm)
    agent = Agent(config, store, llm, extensions=build_extensions(config, store, llm))
    return Runtime(config, conn, store, llm, agent, Dispatcher(agent.handle))


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for name in HTTP_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, getattr(logging, level)))
