"""`mnemo bench memory`'s memory use of a serving process: a new process that opens the
bench's database and makes its chat ready, measured apart from the bench's own."""

from __future__ import annotations

import random

import pytest

from core.config import StorageConfig
from core.storage.engine import open_storage
from memory.bench import cli as bench
from memory.bench.serving_memory import serving_memory
from memory.embeddings import Embedder
from memory.stores import memory_store


def test_a_serving_process_reports_its_memory_use(storage_url: str, embedder: Embedder) -> None:
    storage = open_storage(StorageConfig(url=storage_url))
    try:
        store = memory_store(storage, embedder)
        chat, other = bench._bench_chats(storage)
        bench._fill(store, embedder, (chat, other), 40, random.Random(7))
    finally:
        storage.close()

    figures = serving_memory(storage_url, chat, "int8", ["what did I say about trains?"] * 3)

    assert figures["queries"] == 3
    assert 0 < figures["start_rss_mb"] < figures["rss_mb"] <= figures["peak_rss_mb"]
    # The embedder is loaded before `start_rss_mb`: ONNX Runtime and the model alone are
    # tens of MB, so a figure this low would mean the child measured nothing real.
    assert figures["start_rss_mb"] > 50


def test_a_serving_process_that_fails_says_so(capfd: pytest.CaptureFixture[str]) -> None:
    figures = serving_memory("mysql://nowhere/none", 1, "int8", ["q"])

    assert figures == {"failed": 1.0}
    assert "serving process failed" in capfd.readouterr().err
