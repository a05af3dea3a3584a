"""`mnemo run` picks the channels that are enabled and have a token."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from bots.app import enabled_channels
from bots.discord_bot import DiscordChannel
from bots.runtime import Runtime
from bots.telegram import TelegramChannel
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.bench.fakes.fake_telegram import FakeTelegramServer, user
from core.config import load_config
from core.errors import ConfigError
from tests.conftest import start_mnemo, write_config


def test_channels_with_a_token_are_started(runtime: Runtime) -> None:
    config = runtime.config
    config.terminal.enabled = False
    assert enabled_channels(runtime) == []
    config.telegram.token = "123:abc"
    config.discord.token = "discord-token"
    kinds = [type(channel) for channel in enabled_channels(runtime)]
    assert kinds == [TelegramChannel, DiscordChannel]
    config.telegram.enabled = False
    assert [channel.name for channel in enabled_channels(runtime)] == ["discord"]


def test_channels_receive_the_command_list(runtime: Runtime) -> None:
    runtime.config.terminal.enabled = False
    runtime.config.telegram.token = "123:abc"
    [telegram] = enabled_channels(runtime)
    assert isinstance(telegram, TelegramChannel)
    assert {"start", "help", "reset"} <= {command.name for command in telegram.commands}


def test_bad_webhook_secret_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[telegram]\nwebhook_secret = "has spaces!"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[telegram\] webhook_secret"):
        load_config(path, env={})


def test_mnemo_run_serves_telegram_until_sigterm(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    with FakeTelegramServer() as tg:
        extra = (
            "[terminal]\nenabled = false\n[reflector]\nenabled = false\n"
            f'[telegram]\ntoken = "1:TEST"\napi_base_url = "{tg.base_url}"\n'
        )
        config = write_config(tmp_path / "config.toml", fake_llm.base_url, tmp_path / "d", extra)
        process = start_mnemo(["run"], config, tmp_path)
        try:
            tg.wait_for(lambda server: bool(server.sent("getUpdates")), timeout=120)
            chat = {"id": 55, "type": "private", "first_name": "Eve"}
            tg.push_message(chat, user(55, "Eve"), "hello over the wire")
            tg.wait_for(lambda server: bool(server.sent()), timeout=60)
        finally:
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert tg.sent()[0]["text"] == "echo: hello over the wire"
    assert "running channels: telegram" in stderr
