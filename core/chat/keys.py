"""Naming chats: `channel:chat_id` keys, a chat's number, and which chats are control chats.

Every command that takes a chat (`mnemo inspect`, `--chat` of `memory`, `reflect`,
`strategies`) resolves it here, with one rule: a chat's number (its database id, as
listings show it), or `channel:chat_id`, split at the first colon, so
`telegram:-100123:42` is topic 42 of a group.
"""

from __future__ import annotations

from core.api import Chat, split_chat_key
from core.config import Config
from core.errors import InputError
from core.storage.store import SessionStore
from core.text import whole_number

KNOWN_SHOWN = 20


def resolve_chat(store: SessionStore, key: str, *, create: bool = False) -> Chat:
    """The chat named by `key`; with `create`, a `channel:chat_id` not seen yet is registered.

    Raises `InputError` naming the known chats when there is no such chat.
    """
    text = key.strip()
    number = whole_number(text)
    if number is not None:
        found = store.chat_by_id(number)
        if found is not None:
            return found
    parts = split_chat_key(text)
    if parts is not None:
        found = store.find_chat(*parts)
        if found is not None:
            return found
        if create:
            return store.get_or_create_chat(*parts)
    known = ", ".join(chat.key for chat in store.list_chats(KNOWN_SHOWN)) or "none"
    raise InputError(f"no chat {key!r} (give channel:chat_id or a chat's number; known: {known})")


def is_control_chat(config: Config, chat: Chat) -> bool:
    """Whether `chat`'s exact `channel:chat_id` key is in `[agent] control_chats`.

    Never by its platform id alone: a chat whose id looks like a key (`terminal:CTRL` typed
    as a terminal chat id is `terminal:terminal:CTRL`) must not pass as that chat."""
    return chat.key in config.agent.control_chats
