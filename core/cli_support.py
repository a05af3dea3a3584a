"""Helpers shared by the subcommands of every package: the loaded config and chat lookup."""

from __future__ import annotations

from typing import Protocol

import click

from core.config import Config
from core.db import Connection, connect
from core.store import Chat, SessionStore


class HasConfig(Protocol):
    @property
    def config(self) -> Config: ...


def current_config() -> Config:
    """The config the root `mnemo` group loaded (from --config, $MNEMO_CONFIG, …)."""
    root = click.get_current_context().find_root()
    obj: HasConfig = root.obj
    return obj.config


def open_database(config: Config) -> Connection:
    return connect(config.storage.database_path)


def parse_chat_key(key: str) -> tuple[str, str]:
    """`channel:chat_id` → (channel, chat_id); a bare id means the terminal channel.

    Only the first colon splits, so `telegram:-100123:42` names topic 42 of a group.
    """
    channel, sep, chat_id = key.partition(":")
    if not sep:
        return "terminal", key
    if not channel or not chat_id:
        raise click.BadParameter(f"{key!r}: expected CHANNEL:CHAT_ID, e.g. telegram:12345")
    return channel, chat_id


def find_chat(store: SessionStore, key: str) -> Chat:
    """The chat named by `key`, or a clear error listing how to find chat keys."""
    channel, chat_id = parse_chat_key(key)
    chat = store.find_chat(channel, chat_id)
    if chat is None:
        raise click.ClickException(f"no chat {channel}:{chat_id} in the database")
    return chat
