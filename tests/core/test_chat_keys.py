"""Control chats are matched by their exact `channel:chat_id` key, never by a bare id."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.api import Chat
from core.chat.keys import is_control_chat, resolve_chat
from core.config import load_config
from core.errors import ConfigError, InputError
from core.storage.database import SqliteDatabase
from core.storage.db import connect
from core.storage.session_store import DatabaseSessionStore
from core.text import whole_number


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


def test_control_chat_keys_are_stripped(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[agent]\ncontrol_chats = [" terminal:CTRL "]\n', encoding="utf-8")
    assert is_control_chat(load_config(path, env={}), chat("terminal", "CTRL"))


@pytest.mark.parametrize("key", ["²", "٣", "1" * 30, "telegram", "  "])
def test_a_chat_name_that_is_no_number_or_key_is_a_clear_error(tmp_path: Path, key: str) -> None:
    conn = connect(tmp_path / "mnemo.db", load_vec=False)
    store = DatabaseSessionStore(SqliteDatabase(conn))
    store.get_or_create_chat("terminal", "local")
    with pytest.raises(InputError, match="give channel:chat_id or a chat's number"):
        resolve_chat(store, key)
    assert resolve_chat(store, "1").key == resolve_chat(store, " terminal:local ").key
    conn.close()


@pytest.mark.parametrize(
    ("text", "number"),
    [("12", 12), (" 7 ", 7), ("0", 0), ("²", None), ("٣", None), ("-1", None), ("1" * 19, None)],
)
def test_whole_number_reads_ascii_digits_only(text: str, number: int | None) -> None:
    assert whole_number(text) == number


@pytest.mark.parametrize("entry", ["12345", ":12345", "telegram:"])
def test_a_control_chat_that_is_not_a_key_stops_the_config(tmp_path: Path, entry: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f'[agent]\ncontrol_chats = ["{entry}"]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[agent\] control_chats.*channel:chat_id"):
        load_config(path, env={})
