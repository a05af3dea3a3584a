"""Config: the example file parses, defaults are documented, bad files fail with one line."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel

from core.config import Config, load_config, resolve_config_path
from core.errors import ConfigError
from tests.conftest import REPO

EXAMPLE = REPO / "config.example.toml"


def test_example_config_parses_to_the_defaults() -> None:
    assert load_config(EXAMPLE, env={}) == Config()


def test_every_default_is_documented_in_the_example() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    for section_name, field in Config.model_fields.items():
        assert f"[{section_name}]" in text, section_name
        section = field.annotation
        assert isinstance(section, type) and issubclass(section, BaseModel)
        body = text.split(f"[{section_name}]", 1)[1].split("\n[", 1)[0]
        for key in section.model_fields:
            assert re.search(rf"^#? ?{key} =", body, re.MULTILINE), f"[{section_name}] {key}"


def test_parsed_example_has_the_required_keys() -> None:
    raw = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    for key in ("base_url", "api_key", "model", "max_output_tokens", "timeout_s"):
        assert key in raw["llm"]
    assert "data_dir" in raw["storage"]
    for key in ("name", "instructions", "max_tool_iterations"):
        assert key in raw["agent"]


def test_invalid_value_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[llm]\ncontext_window = "big"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    message = str(caught.value)
    assert "\n" not in message
    assert "[llm] context_window" in message and "integer" in message


def test_unknown_key_is_an_error_not_ignored(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[agent]\nnmae = 'typo'\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[agent\] nmae"):
        load_config(path, env={})


def test_broken_toml_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[llm\nmodel = 1", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path, env={})


def test_missing_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.toml", env={})


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[llm]\napi_key = "from-file"\nmodel = "m"\n', encoding="utf-8")
    env = {
        "OPENAI_API_KEY": "sk-env",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "TELEGRAM_BOT_TOKEN": "123:abc",
        "DISCORD_BOT_TOKEN": "dtoken",
    }
    config = load_config(path, env=env)
    assert config.llm.api_key == "sk-env"
    assert config.llm.base_url == "http://127.0.0.1:9/v1"
    assert config.llm.model == "m"
    assert config.telegram.token == "123:abc"
    assert config.discord.token == "dtoken"


def test_config_path_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MNEMO_CONFIG", raising=False)
    assert resolve_config_path(None) is None
    (tmp_path / "config.toml").write_text("", encoding="utf-8")
    assert resolve_config_path(None) == Path("config.toml")
    monkeypatch.setenv("MNEMO_CONFIG", "/etc/mnemo.toml")
    assert resolve_config_path(None) == Path("/etc/mnemo.toml")
    assert resolve_config_path("given.toml") == Path("given.toml")


@pytest.mark.parametrize(
    ("body", "key", "says"),
    [
        ('mode = "webhook"\nwebhook_secret = "s"', "webhook_url", "public https:// URL"),
        ('mode = "webhook"\nwebhook_url = "https://b.example/tg"', "webhook_secret", "same for"),
        ('webhook_url = "https://b.example/tg"', "webhook_url", 'set mode = "webhook"'),
        ("webhook_port = 8443", "telegram", "webhook_port is now listen_port"),
    ],
)
def test_webhook_mode_needs_its_url_and_a_shared_secret(
    tmp_path: Path, body: str, key: str, says: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f"[telegram]\n{body}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert key in str(caught.value) and says in str(caught.value)


def test_webhook_secret_comes_from_the_environment_and_the_path_from_the_url(
    tmp_path: Path,
) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[telegram]\nmode = "webhook"\nwebhook_url = "https://b.example/tg/hook"\n')
    config = load_config(path, env={"MNEMO_TELEGRAM_WEBHOOK_SECRET": "from-env"})
    assert config.telegram.webhook_secret == "from-env"
    assert config.telegram.served_path == "/tg/hook"
    config.telegram.webhook_path = "internal"  # behind a proxy that rewrites the path
    assert config.telegram.served_path == "/internal"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("shard_ids = [0]", "needs shard_count"),
        ("shard_count = 2\nshard_ids = [0, 2]", "[2] not in 0..1"),
        ("shard_count = 2\nshard_ids = [1, 1]", "names a shard twice"),
        ("shard_count = 0", "greater than or equal to 1"),
    ],
)
def test_discord_shards_are_checked(tmp_path: Path, body: str, says: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f"[discord]\n{body}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert "[discord] shard_" in str(caught.value) and says in str(caught.value)
