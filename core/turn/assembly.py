"""Wiring one bot: the given plugins' extensions around a store, a model client and the config.

`bots.runtime` (the composition root) calls `build_agent` with every plugin; benchmarks
and tests call it with fewer. Nothing else builds an `Agent`.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.config import Config
from core.context.compaction import Compactor
from core.context.plan import RequestPlanner
from core.model.client import LLM
from core.storage.engine import Storage
from core.storage.file_store import FileStore
from core.storage.store import DeliveryStore, SessionStore
from core.storage.stores import delivery_store, file_store, live_turn_store
from core.turn.activity import TurnActivity
from core.turn.agent import Agent
from core.turn.extensions import Extensions
from core.turn.hooks import Host, Plugin
from core.turn.outgoing import Outgoing


def build_agent(
    config: Config,
    storage: Storage,
    store: SessionStore,
    llm: LLM,
    plugins: Sequence[Plugin],
    deliveries: DeliveryStore | None = None,
    files: FileStore | None = None,
) -> Agent:
    """An agent whose extensions are those of `plugins`, registered in order. `deliveries`
    must share `store`'s database (default: the one for `storage`); `files` are the chats'
    files (default: the ones for `storage` and the config's data dir)."""
    if files is None:
        files = file_store(storage, config.storage.data_dir)
    extensions = Extensions()
    compactor = Compactor(config, store, llm, files, before=extensions.before_compaction)
    planner = RequestPlanner(config, store, extensions.tools, llm.model)
    outgoing = Outgoing()
    activity = TurnActivity()
    host = Host(
        config, storage, store, llm, extensions, compactor, planner, files, outgoing, activity
    )
    for plugin in plugins:
        extension = plugin.extension(host)
        if extension is not None:
            extensions.add(extension)
    deliveries = deliveries if deliveries is not None else delivery_store(storage)
    return Agent(
        config, store, llm, extensions, planner, compactor, deliveries, files, outgoing,
        live=live_turn_store(storage), activity=activity,
    )  # fmt: skip
