"""`mnemo init` as a subprocess against fake servers of each kind on 127.0.0.1: Ollama,
llama.cpp, vLLM, a hosted API, nothing at all; Telegram and Discord tokens, good and bad;
an existing config is never replaced without --force."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import tomllib
from pathlib import Path

from core.bench.fakes.fake_discord_api import FakeDiscordAPI
from core.bench.fakes.fake_openai import FakeOpenAIServer, OllamaTraits, ServerTraits
from core.bench.fakes.fake_telegram import FakeTelegramServer
from core.config import load_config
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[2]
SECRETS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TELEGRAM_BOT_TOKEN", "DISCORD_BOT_TOKEN")


def dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def init(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in SECRETS and k != "MNEMO_CONFIG"}
    return run_cli(["init", *args], {**clean, "PYTHONPATH": str(REPO), **(env or {})}, cwd,
                   timeout=60)  # fmt: skip


def written(cwd: Path) -> dict[str, object]:
    path = cwd / "config.toml"
    load_config(path, env={})  # what init writes is a valid config
    return tomllib.loads(path.read_text(encoding="utf-8"))


def test_finds_ollama_with_its_models_and_windows(tmp_path: Path) -> None:
    traits = ServerTraits(served=("llama3.2", "qwen3:8b"), ollama=OllamaTraits(num_ctx=8192))
    with FakeOpenAIServer(traits=traits) as server:
        done = init(tmp_path, "--yes", "--scan", dead_url(), "--scan", server.origin)
    assert done.returncode == 0, done.stderr
    assert "nothing" in done.stdout and "ollama, serving:" in done.stdout
    assert "llama3.2:latest (8,192-token window, Ollama num_ctx of the model)" in done.stdout
    assert "qwen3:8b (8,192-token window" in done.stdout
    config = written(tmp_path)
    assert config["llm"] == {"base_url": f"{server.origin}/v1", "model": "llama3.2:latest"}
    assert config["embedded"] == {"use": "off"}


def test_finds_llama_cpp_and_its_n_ctx(tmp_path: Path) -> None:
    traits = ServerTraits(served=("SmolLM2-135M",), props=True, n_ctx=2048)
    with FakeOpenAIServer(traits=traits) as server:
        done = init(tmp_path, "--yes", "--scan", server.origin)
    assert done.returncode == 0, done.stderr
    assert "llama.cpp, serving:" in done.stdout
    assert "SmolLM2-135M (2,048-token window, server /props (n_ctx))" in done.stdout
    assert written(tmp_path)["llm"] == {
        "base_url": f"{server.origin}/v1",
        "model": "SmolLM2-135M",
    }


def test_vllm_by_model_url_with_a_named_model(tmp_path: Path) -> None:
    traits = ServerTraits(served=("Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-1.5B"), max_model_len=32768)
    with FakeOpenAIServer(traits=traits) as server:
        done = init(
            tmp_path, "--yes", "--model-url", server.base_url, "--model", "Qwen/Qwen2.5-1.5B"
        )
    assert done.returncode == 0, done.stderr
    assert "vllm, serving:" in done.stdout and "32,768-token window" in done.stdout
    assert written(tmp_path)["llm"] == {
        "base_url": f"{server.origin}/v1",
        "model": "Qwen/Qwen2.5-1.5B",
    }


def test_a_model_url_where_nothing_answers_writes_nothing(tmp_path: Path) -> None:
    done = init(tmp_path, "--yes", "--model-url", dead_url())
    assert done.returncode == 1
    assert "no model server answers" in done.stderr
    assert not (tmp_path / "config.toml").exists()


def test_hosted_api_key_stays_in_the_environment(tmp_path: Path) -> None:
    traits = ServerTraits(served=("text-embedding-3-small", "gpt-4o-mini", "gpt-4o"))
    with FakeOpenAIServer(traits=traits) as server:
        env = {"OPENAI_API_KEY": "sk-test-123", "OPENAI_BASE_URL": server.base_url}
        done = init(tmp_path, "--yes", "--scan", dead_url(), env=env)
    assert done.returncode == 0, done.stderr
    assert "gpt-4o-mini (128,000-token window, known model)" in done.stdout
    text = (tmp_path / "config.toml").read_text(encoding="utf-8")
    assert "sk-test-123" not in text and "from OPENAI_API_KEY" in text
    assert written(tmp_path)["llm"] == {"base_url": server.base_url, "model": "gpt-4o-mini"}


def test_nothing_found_means_the_embedded_model(tmp_path: Path) -> None:
    done = init(tmp_path, "--yes", "--scan", dead_url())
    assert done.returncode == 0, done.stderr
    assert "No model server found: the embedded demo model it is." in done.stdout
    assert "mnemo embedded install" in done.stdout
    config = written(tmp_path)
    assert config["embedded"] == {"use": "on"} and "llm" not in config


def test_an_existing_config_needs_force_and_is_kept_as_bak(tmp_path: Path) -> None:
    original = '[agent]\nname = "Mine"\n'
    (tmp_path / "config.toml").write_text(original, encoding="utf-8")
    refused = init(tmp_path, "--yes", "--embedded")
    assert refused.returncode == 1 and "pass --force" in refused.stderr
    assert (tmp_path / "config.toml").read_text(encoding="utf-8") == original
    forced = init(tmp_path, "--yes", "--embedded", "--force")
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "config.toml.bak").read_text(encoding="utf-8") == original
    assert written(tmp_path)["embedded"] == {"use": "on"}


def test_telegram_token_checked_with_get_me_and_privacy_shown(tmp_path: Path) -> None:
    with FakeTelegramServer() as telegram:
        done = init(
            tmp_path, "--yes", "--embedded", "--telegram-token", "123:abc",
            "--telegram-api-url", telegram.base_url,
        )  # fmt: skip
        assert [call.method for call in telegram.calls] == ["getMe"]
    assert done.returncode == 0, done.stderr
    assert "Telegram: @" in done.stdout and "privacy mode on" in done.stdout
    assert written(tmp_path)["telegram"] == {"token": "123:abc"}
    assert stat.S_IMODE((tmp_path / "config.toml").stat().st_mode) == 0o600


def test_a_refused_telegram_token_writes_nothing(tmp_path: Path) -> None:
    with FakeTelegramServer() as telegram:
        telegram.fail_next("getMe", 401, "Unauthorized")
        done = init(
            tmp_path, "--yes", "--embedded", "--telegram-token", "123:bad",
            "--telegram-api-url", telegram.base_url,
        )  # fmt: skip
    assert done.returncode == 1
    assert "Telegram refused the token (Unauthorized)" in done.stderr
    assert not (tmp_path / "config.toml").exists()


def test_telegram_token_from_the_environment_is_checked_not_written(tmp_path: Path) -> None:
    with FakeTelegramServer() as telegram:
        telegram.reads_all_group_messages = True
        done = init(
            tmp_path, "--yes", "--embedded", "--telegram-api-url", telegram.base_url,
            env={"TELEGRAM_BOT_TOKEN": "123:env"},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Telegram (TELEGRAM_BOT_TOKEN): @" in done.stdout and "privacy mode off" in done.stdout
    assert "telegram" not in written(tmp_path)


def test_discord_token_and_its_message_content_intent(tmp_path: Path) -> None:
    with FakeDiscordAPI(tokens={"good"}, content_intent=False) as discord:
        done = init(
            tmp_path, "--yes", "--embedded", "--discord-token", "good",
            "--discord-api-url", discord.base_url,
        )  # fmt: skip
        bad = init(
            tmp_path, "--yes", "--embedded", "--force", "--discord-token", "bad",
            "--discord-api-url", discord.base_url,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Discord: mnemo-bot: message content intent OFF" in done.stdout
    assert bad.returncode == 1
    assert "Discord refused the token (401: Unauthorized)" in bad.stderr
    assert written(tmp_path)["discord"] == {"token": "good"}  # the refused run wrote nothing
