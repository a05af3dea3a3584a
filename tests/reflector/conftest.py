"""Reflectors on each engine: `reflectors.open()` gives a Reflector with a connection (SQLite)
or pool (PostgreSQL) of its own on the test's database, as another process would have;
`db` is one more, for the assertions."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import pytest

from core.config import Config
from core.model.client import OpenAILLM
from core.storage.engine import Storage, open_storage
from memory.embeddings import Embedder
from memory.stores import memory_store
from reflector.contributors import PassContributor
from reflector.reflection import Reflector
from reflector.stores import build_reflector


class Reflectors:
    """Opens reflectors on the configured database; closes them all at the end."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.storages: dict[int, Storage] = {}

    def open(
        self,
        embedder: Embedder | None = None,
        contributors: Sequence[PassContributor] = (),
        clock: Callable[[], float] = time.time,
    ) -> Reflector:
        """A reflector (no contributors unless given) with `embedder`, or none: keywords;
        `clock` times its leases."""
        storage = open_storage(self.config.storage)
        memories = memory_store(storage).with_embedder(embedder)
        reflector = build_reflector(
            self.config,
            storage,
            OpenAILLM(self.config.llm),
            memories=memories,
            contributors=contributors,
            clock=clock,
        )
        self.storages[id(reflector)] = storage
        return reflector

    def storage_of(self, reflector: Reflector) -> Storage:
        return self.storages[id(reflector)]

    def close(self) -> None:
        for storage in self.storages.values():
            storage.close()


@pytest.fixture
def reflector_config(config: Config, storage_url: str) -> Config:
    """The test config on each engine."""
    config.storage.url = storage_url
    return config


@pytest.fixture
def db(reflector_config: Config) -> Iterator[Storage]:
    """The migrated test database (opened first: it migrates)."""
    opened = open_storage(reflector_config.storage)
    yield opened
    opened.close()


@pytest.fixture
def reflectors(reflector_config: Config, db: Storage) -> Iterator[Reflectors]:
    opened = Reflectors(reflector_config)
    yield opened
    opened.close()


@pytest.fixture
def reflector(reflectors: Reflectors) -> Reflector:
    return reflectors.open()


@pytest.fixture
def vec_reflector(reflectors: Reflectors, embedder: Embedder) -> Reflector:
    return reflectors.open(embedder)
