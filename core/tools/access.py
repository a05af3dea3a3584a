"""Who may call a tool: a chat matched against an operator's list of chat patterns
(`[[mcp.servers]] chats`, `[web_tools] chats`)."""

from __future__ import annotations

from collections.abc import Iterable

from core.api import Chat


def chat_matches(patterns: Iterable[str], chat: Chat, control_chats: Iterable[str]) -> bool:
    """Whether `chat` matches one of `patterns`: `"*"`, its exact key (`telegram:123`), its
    channel (`telegram:*`), `"private"` (a private chat) or `"control"` (a control chat)."""
    for pattern in patterns:
        if pattern in ("*", chat.key):
            return True
        if pattern == "private" and chat.kind == "private":
            return True
        if pattern == "control" and chat.key in control_chats:
            return True
        if pattern.endswith(":*") and pattern[:-2] == chat.channel:
            return True
    return False
