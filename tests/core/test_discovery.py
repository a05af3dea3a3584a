"""Asking the server about its model (llama.cpp, vLLM, Ollama) and doctor's model probes."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from core.bench.fakes.fake_openai import FakeOpenAIServer, OllamaTraits, ServerTraits
from core.config import LLMConfig
from core.model.client import OpenAILLM
from core.model.discovery import discover, server_root
from core.model.probes import model_checks
from core.model.profile import load_profile, window_for
from core.storage.database import SqliteDatabase
from core.storage.db import connect
from core.storage.session_store import DatabaseSessionStore
from tests.conftest import make_config
from tests.core.support import light_runtime


@pytest.fixture
def store(tmp_path: Path) -> DatabaseSessionStore:
    return DatabaseSessionStore(SqliteDatabase(connect(tmp_path / "db.sqlite")))


async def _discover(traits: ServerTraits, store: DatabaseSessionStore, model: str) -> str:
    with FakeOpenAIServer(traits=traits) as server:
        config = LLMConfig(base_url=server.base_url, model=model)
        async with httpx.AsyncClient() as client:
            await discover(client, store, config, model)
        window = window_for(store, config, model)
        return f"{window.tokens} {window.source}"


def test_server_root_drops_the_v1() -> None:
    assert server_root("http://localhost:11434/v1/") == "http://localhost:11434"
    assert server_root("http://h:8080") == "http://h:8080"


async def test_llama_cpp_props(store: DatabaseSessionStore) -> None:
    said = await _discover(ServerTraits(props=True, n_ctx=2048), store, "fake-model")
    assert said == "2048 server /props (n_ctx)"


async def test_vllm_max_model_len(store: DatabaseSessionStore) -> None:
    traits = ServerTraits(served=("Qwen/Qwen2.5-7B",), max_model_len=8192)
    said = await _discover(traits, store, "Qwen/Qwen2.5-7B")
    assert said == "8192 server /v1/models (max_model_len)"


@pytest.mark.parametrize(
    ("ollama", "expected"),
    [
        (OllamaTraits(), "4096 Ollama default num_ctx"),
        (OllamaTraits(num_ctx=8192), "8192 Ollama num_ctx of the model"),
        (OllamaTraits(num_ctx=8192, running_ctx=16384), "16384 Ollama /api/ps (loaded model)"),
    ],
)
async def test_ollama_windows(
    store: DatabaseSessionStore, ollama: OllamaTraits, expected: str
) -> None:
    said = await _discover(ServerTraits(served=("llama3.2",), ollama=ollama), store, "llama3.2")
    assert said.startswith(expected)


async def test_ollama_model_without_tools_is_remembered(store: DatabaseSessionStore) -> None:
    traits = ServerTraits(served=("gemma",), ollama=OllamaTraits(tools=False))
    await _discover(traits, store, "gemma")
    assert load_profile(store, "gemma").tools is False


async def test_a_server_that_says_nothing_leaves_the_default(store: DatabaseSessionStore) -> None:
    said = await _discover(ServerTraits(), store, "some-model")
    assert said.startswith("4096 default")


async def test_the_runtime_asks_at_start(tmp_path: Path) -> None:
    with FakeOpenAIServer(traits=ServerTraits(props=True, n_ctx=2048)) as server:
        runtime = light_runtime(make_config(tmp_path, server.base_url))
        try:
            await runtime.start()
            assert runtime.planner.window().tokens == 2048
        finally:
            await runtime.llm.aclose()
            runtime.close()


async def _checks(
    traits: ServerTraits, store: DatabaseSessionStore, **llm: object
) -> dict[str, str]:
    with FakeOpenAIServer(traits=traits) as server:
        config = LLMConfig(base_url=server.base_url, model="fake-model", max_retries=0)
        for key, value in llm.items():
            setattr(config, key, value)
        client = OpenAILLM(config)
        checks = await model_checks(client, store, config)
        await client.aclose()
    return {check.name: check.line() for check in checks}


async def test_doctor_on_a_server_that_does_everything(store: DatabaseSessionStore) -> None:
    lines = await _checks(ServerTraits(props=True, n_ctx=8192), store)
    assert all(line.startswith("[ok  ]") for line in lines.values()), lines
    assert "8192 tokens (server /props" in lines["context window"]
    profile = load_profile(store, "fake-model")
    assert (profile.late_system, profile.tools, profile.structured) == (True, True, "json_schema")


async def test_doctor_names_each_problem_and_its_fix(store: DatabaseSessionStore) -> None:
    traits = ServerTraits(strict_system=True, no_json_schema=True, tools_dropped=True)
    lines = await _checks(traits, store)
    assert (
        lines["request layout"].startswith("[warn]") and "user message" in lines["request layout"]
    )
    assert "--chat_format chatml-function-calling" in lines["tools"]
    assert lines["structured output"] == "[ok  ] structured output: response_format json_object"
    assert "server does not say" in lines["context window"]
    profile = load_profile(store, "fake-model")
    assert (profile.late_system, profile.tools_in_prompt) == (False, False)


async def test_doctor_on_ollama_without_the_model_or_tools(store: DatabaseSessionStore) -> None:
    missing = await _checks(ServerTraits(served=("qwen2.5",), ollama=OllamaTraits()), store)
    assert missing["model"].startswith("[FAIL]") and "ollama pull fake-model" in missing["model"]
    assert list(missing) == ["model"]
    no_tools = ServerTraits(no_tools=True, served=("fake-model", "other"))
    lines = await _checks(no_tools, store)
    assert lines["tools"].startswith("[warn]") and "does not do tools" in lines["tools"]
    assert load_profile(store, "fake-model").tools is False


async def test_doctor_warns_when_config_and_server_disagree(store: DatabaseSessionStore) -> None:
    lines = await _checks(ServerTraits(props=True, n_ctx=2048), store, context_window=8192)
    assert lines["context window"].startswith("[warn]")
    assert "server says 2048" in lines["context window"]


@pytest.mark.parametrize(
    ("traits", "configured", "label"),
    [
        # llama.cpp serves its one model whatever `[llm] model` names: the label is its id.
        (ServerTraits(served=("SmolLM2",), props=True, n_ctx=2048), "llama3.2", "SmolLM2"),
        (ServerTraits(served=("l3", "q"), ollama=OllamaTraits()), "l3", "l3:latest"),
        (ServerTraits(served=("a/b", "c/d"), max_model_len=4096), "c/d", "c/d"),
        # Several models and none of them the configured one: nothing to say.
        (ServerTraits(served=("x", "y")), "z", "z"),
    ],
)  # fmt: skip
async def test_the_label_is_the_id_the_server_reports(
    store: DatabaseSessionStore, traits: ServerTraits, configured: str, label: str
) -> None:
    await _discover(traits, store, configured)
    profile = load_profile(store, configured)
    assert (profile.served_model or profile.model) == label
    assert profile.served_model == (None if label == configured == "z" else label)
