"""Reads never write: `/context`, `mnemo inspect` and the keeper's properties change nothing."""

from __future__ import annotations

from pathlib import Path

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.config import Config
from core.storage.database import SqliteDatabase
from core.storage.db import Connection
from memory.embeddings import Embedder
from memory.keeper import MemoryKeeper
from memory.memory_store import DatabaseMemoryStore
from memory.strategies.strategy_store import DatabaseStrategyStore
from tests.conftest import run_mnemo, write_config


def promoted_strategy(runtime: Runtime, chat_key: str) -> tuple[DatabaseStrategyStore, int]:
    chat = runtime.store.get_or_create_chat("terminal", chat_key)
    store = DatabaseStrategyStore(runtime.storage.database)
    strategy_id = store.add(chat.id, "format", "Numbered steps work better for this user")
    store.tag(strategy_id, "helpful")
    store.tag(strategy_id, "helpful")
    return store, strategy_id


def last_used(store: DatabaseStrategyStore, strategy_id: int) -> str:
    strategy = store.get(strategy_id)
    assert strategy is not None
    return strategy.last_used_at


async def test_context_command_leaves_last_used_alone_and_a_turn_moves_it(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    store, strategy_id = promoted_strategy(runtime, "s")
    before = last_used(store, strategy_id)
    report = await runtime.dispatcher(Inbound("terminal", "s", "/context"))
    assert report is not None and "learned_strategies" in report.text  # it was read
    assert last_used(store, strategy_id) == before
    fake_llm.add(FakeReply("ok"))
    await runtime.dispatcher(Inbound("terminal", "s", "how do I set up the router?"))
    assert last_used(store, strategy_id) == before  # offered, but the reply did not cite it
    fake_llm.add(FakeReply(f"ok [s{strategy_id}]"))
    reply = await runtime.dispatcher(Inbound("terminal", "s", "and the firewall?"))
    assert reply is not None and reply.text == "ok"  # the citation is not shown
    assert last_used(store, strategy_id) > before  # a reply that cited it used it


async def test_inspect_leaves_last_used_alone(
    runtime: Runtime, tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    store, strategy_id = promoted_strategy(runtime, "i")
    before = last_used(store, strategy_id)
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, tmp_path / "data")
    result = run_mnemo(["inspect", "terminal:i"], config)
    assert result.returncode == 0, result.stderr
    assert "learned_strategies" in result.stdout
    assert last_used(store, strategy_id) == before


def test_reading_the_keeper_loads_no_model(config: Config, conn: Connection) -> None:
    loads: list[str] = []

    def factory() -> Embedder | None:
        loads.append("loaded")
        return None

    keeper = MemoryKeeper(config, DatabaseMemoryStore(SqliteDatabase(conn)), factory)
    assert keeper.embedder is None and keeper.store.embedder is None
    assert keeper.mode() == "bm25" and not keeper.loaded
    assert loads == []
    keeper.load_embedder_now()
    assert loads == ["loaded"] and keeper.loaded
