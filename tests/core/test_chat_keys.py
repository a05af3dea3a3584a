"""Control chats are matched by their exact `channel:chat_id` key, never by a bare id."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.api import Chat
from core.chat_keys import is_control_chat
from core.config import load_config
from core.errors import ConfigError


def chat(channel: str, external_id: str) -> Chat:
    return Chat(id=1, channel=channel, external_chat_id=external_id, title="", kind="private")


def test_a_control_chat_matches_its_exact_key_only(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[agent]\ncontrol_chats = ["terminal:CTRL"]\n', encoding="utf-8")
    config = load_config(path, env={})
    assert is_control_chat(config, chat("terminal", "CTRL"))
    # A chat whose own id is the key: its key is terminal:terminal:CTRL, not a control chat.
    assert not is_control_chat(config, chat("terminal", "terminal:CTRL"))
    assert not is_control_chat(config, chat("telegram", "CTRL"))


@pytest.mark.parametrize("entry", ["12345", ":12345", "telegram:"])
def test_a_control_chat_that_is_not_a_key_stops_the_config(tmp_path: Path, entry: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f'[agent]\ncontrol_chats = ["{entry}"]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[agent\] control_chats.*channel:chat_id"):
        load_config(path, env={})
