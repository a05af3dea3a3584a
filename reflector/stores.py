"""The reflector for a `Storage`: its own stores (`reflector.state_store`), the stores it
borrows from `core` and `memory`, and the transaction and savepoint it commits with."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from core.config import Config
from core.model.client import LLM
from core.storage.db import Connection
from core.storage.engine import Storage, sqlite_storage
from core.storage.stores import session_store
from core.tasks.task_store import TaskStore
from memory.store import MemoryStore
from memory.stores import memory_store, strategy_store
from reflector.contributors import PassContributor
from reflector.reflection import Reflector, ReflectorStores, configured_embedder
from reflector.state_store import DatabaseCursorStore, DatabaseLeaseStore, DatabaseRunStore
from reflector.store import CursorStore, LeaseStore, RunStore

Clock = Callable[[], float]
SAVEPOINT = "reflector_contributor"


def reflector_stores(
    config: Config,
    storage: Storage,
    *,
    memories: MemoryStore | None = None,
    clock: Clock = time.time,
) -> ReflectorStores:
    """Every store a reflector uses, on the engine of `storage`."""
    sessions = session_store(storage)
    return ReflectorStores(
        sessions.transaction,
        lambda: storage.database.savepoint(SAVEPOINT),
        sessions,
        memories or memory_store(storage),
        cursor_store(storage),
        lease_store(storage, config.reflector.lease_s, clock),
        run_store(storage),
        TaskStore(storage.database).timezone_of,
    )


def build_reflector(
    config: Config,
    storage: Storage,
    llm: LLM,
    *,
    memories: MemoryStore | None = None,
    contributors: Sequence[PassContributor] | None = None,
    clock: Clock = time.time,
) -> Reflector:
    """A reflector on `storage`. Without `memories`, the configured embedding model is
    loaded the first time a fact needs a vector; without `contributors`, the default ones
    (the strategies playbook) take part in every pass."""
    from reflector.playbook import default_contributors

    stores = reflector_stores(config, storage, memories=memories, clock=clock)
    if contributors is None:
        contributors = default_contributors(strategy_store(storage))
    factory = None if memories is not None else configured_embedder(config)
    return Reflector(config, stores, llm, contributors=contributors, embedder_factory=factory)


def sqlite_reflector(
    config: Config,
    db: Connection,
    llm: LLM,
    *,
    memories: MemoryStore | None = None,
    contributors: Sequence[PassContributor] = (),
    clock: Clock = time.time,
) -> Reflector:
    """A reflector on one SQLite connection with only the given contributors (tests and
    the reflector benchmark)."""
    return build_reflector(
        config, sqlite_storage(db), llm, memories=memories, contributors=contributors, clock=clock
    )


def cursor_store(storage: Storage) -> CursorStore:
    return DatabaseCursorStore(storage.database)


def lease_store(storage: Storage, lease_s: float, clock: Clock = time.time) -> LeaseStore:
    return DatabaseLeaseStore(storage.database, lease_s, clock)


def run_store(storage: Storage) -> RunStore:
    return DatabaseRunStore(storage.database)
