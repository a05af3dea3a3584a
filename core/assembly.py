"""Wiring one bot: the given plugins' extensions around a store, a model client and the config.

`bots.runtime` (the composition root) calls `build_agent` with every plugin; benchmarks
and tests call it with fewer. Nothing else builds an `Agent`.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.compaction import Compactor
from core.config import Config
from core.extensions import Extensions
from core.file_store import FileStore
from core.hooks import Host, Plugin
from core.llm import LLM
from core.request_plan import RequestPlanner
from core.storage import Storage
from core.store import DeliveryStore, SessionStore
from core.stores import delivery_store, file_store
from core.turn import Agent


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
    host = Host(config, storage, store, llm, extensions, compactor, planner, files)
    for plugin in plugins:
        extension = plugin.extension(host)
        if extension is not None:
            extensions.add(extension)
    deliveries = deliveries if deliveries is not None else delivery_store(storage)
    return Agent(config, store, llm, extensions, planner, compactor, deliveries, files)
