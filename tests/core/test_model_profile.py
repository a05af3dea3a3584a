"""Model profiles: which window wins, the answer's reserve, facts that persist per model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.config import LLMConfig
from core.model.profile import (
    DEFAULT_WINDOW,
    ModelProfile,
    effective_window,
    hosted_window,
    learn,
    load_profile,
    model_label,
    request_tokens_for,
    resolve_window,
    served_id,
    server_disagrees,
    tools_enabled,
)
from core.storage.database import SqliteDatabase
from core.storage.db import connect
from core.storage.session_store import DatabaseSessionStore


def test_config_wins_then_learned_then_hosted_then_a_conservative_default() -> None:
    learned = ModelProfile("llama3.2", window=2048, window_source="overflow error")
    assert resolve_window(LLMConfig(context_window=8192), learned).tokens == 8192
    assert resolve_window(LLMConfig(), learned).source == "overflow error"
    assert resolve_window(LLMConfig(), ModelProfile("gpt-4o-mini")).tokens == 128_000
    unknown = resolve_window(LLMConfig(), ModelProfile("llama3.2"))
    assert unknown.tokens == DEFAULT_WINDOW == 4096 and unknown.source.startswith("default")


def test_open_weight_models_are_not_assumed_to_have_their_trained_window() -> None:
    # Ollama serves llama3.2 with 4,096 tokens by default, not the 131,072 it was trained on.
    assert hosted_window("llama3.2:3b") is None
    assert hosted_window("library/gpt-4o:latest") == 128_000


def test_the_answer_reserve_is_at_most_a_quarter_of_the_window() -> None:
    assert effective_window(2048, 2048) == 1536
    assert request_tokens_for(2048, 2048) == 512
    assert effective_window(131_072, 2048) == 129_024
    assert request_tokens_for(131_072, 2048) == 2048


def test_learned_facts_persist_and_only_changes_are_saved(tmp_path: Path) -> None:
    conn = connect(tmp_path / "db.sqlite")
    store = DatabaseSessionStore(SqliteDatabase(conn))
    assert load_profile(store, "m") == ModelProfile("m")
    learn(store, "m", window=2048, window_source="overflow error")
    learn(store, "m", late_system=False)
    conn.close()
    again = DatabaseSessionStore(SqliteDatabase(connect(tmp_path / "db.sqlite")))
    profile = load_profile(again, "m")
    assert (profile.window, profile.late_system, profile.tools) == (2048, False, None)
    assert load_profile(again, "other").window is None


def test_disagreement_and_tool_switch() -> None:
    served = ModelProfile("m", window=2048, window_source="server /props (n_ctx)")
    assert "2048" in server_disagrees(LLMConfig(context_window=8192), served)
    assert server_disagrees(LLMConfig(context_window=2048), served) == ""
    assert server_disagrees(LLMConfig(), served) == ""
    no_tools = ModelProfile("m", tools=False)
    assert not tools_enabled(LLMConfig(), no_tools)
    assert tools_enabled(LLMConfig(tools="on"), no_tools)
    assert not tools_enabled(LLMConfig(tools="off"), ModelProfile("m"))


@dataclass(frozen=True)
class ServedProfile(ModelProfile):
    """A profile with the served id that discovery stores (`served_model`)."""

    served_model: str | None = None


def test_the_model_is_labelled_with_the_id_the_server_reports() -> None:
    assert model_label(ModelProfile("llama3.2")) == "llama3.2"
    served = ServedProfile("llama3.2", served_model="SmolLM2-135M-Instruct")
    assert served_id(served) == "SmolLM2-135M-Instruct"
    assert model_label(served) == "SmolLM2-135M-Instruct (configured as llama3.2)"
    assert model_label(ServedProfile("qwen3:4b", served_model="qwen3:4b")) == "qwen3:4b"
