"""Request-time pruning: stub old tool results and drop old reasoning, in the request only.

Works on copies of the request messages; the stored history is never touched. On a small
window (`SmallWindowPruning`) the old user and assistant texts are shortened to their head
too, and the protected tail moves in steps of whole turns, so the pruned part of the
request stays byte-identical for a few turns (a server's KV cache keeps serving it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.context.request import DYNAMIC_HEADER
from core.text import strip_think

STUB_CHARS = 200
REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")


CHAT_STUB_CHARS = 80
# Sections of a context block that serve the turn they were built for: copies of earlier
# messages the recall index found (`conversation_search` finds them again). On a small
# window an old block loses them, as old turns lose their texts; memories and notes stay.
TRANSIENT_SECTIONS = ("recalled",)
_TRANSIENT = re.compile(
    r"(?:\n\n)?<(" + "|".join(TRANSIENT_SECTIONS) + r")(?: [^>\n]*)?>\n.*?\n</\1>", re.S
)


@dataclass(frozen=True)
class PruneStats:
    tool_results_pruned: int = 0
    reasoning_dropped: int = 0
    chars_removed: int = 0
    texts_shortened: int = 0  # user and assistant texts (small windows only)

    @property
    def pruned(self) -> bool:
        return bool(self.tool_results_pruned or self.reasoning_dropped or self.texts_shortened)


def stepped_start(messages: Sequence[dict[str, Any]], protect_turns: int) -> int:
    """Like `protected_start`, but the protected tail grows from `protect_turns` to twice
    that before it moves on by `protect_turns` whole turns at once."""
    users = [index for index, message in enumerate(messages) if message.get("role") == "user"]
    if protect_turns <= 0 or len(users) <= protect_turns:
        return 0 if users else len(messages)
    before = len(users) - protect_turns  # user turns in front of the protected ones
    kept = before - before % protect_turns
    return users[kept]


def shorten_text(content: str) -> str:
    """The head of an old chat text and a `[shortened: N chars]` marker."""
    return f"{content[:CHAT_STUB_CHARS]}… [shortened: {len(content) - CHAT_STUB_CHARS} chars]"


def protected_start(messages: Sequence[dict[str, Any]], protect_turns: int) -> int:
    """Index of the first message of the last `protect_turns` user turns (len if none)."""
    if protect_turns <= 0:
        return len(messages)
    seen = 0
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            seen += 1
            if seen == protect_turns:
                return index
    return 0


def stub_tool_result(content: str) -> str:
    """The first 200 chars of a tool result and a `[pruned: N chars]` marker."""
    return f"{content[:STUB_CHARS]}\n[pruned: {len(content) - STUB_CHARS} chars]"


def prune_request(
    messages: Sequence[dict[str, Any]], protect_turns: int, small_window: bool = False
) -> tuple[list[dict[str, Any]], PruneStats]:
    """A pruned copy of `messages`: tool results and reasoning before the protected turns;
    on a `small_window` their user and assistant texts too (the tail moves in steps)."""
    if small_window:
        boundary = stepped_start(messages, protect_turns)
    else:
        boundary = protected_start(messages, protect_turns)
    if 0 < boundary < len(messages) and is_block(messages[boundary - 1]):
        boundary -= 1  # a protected user message keeps the block sent with it
    pruned: list[dict[str, Any]] = []
    totals = [0, 0, 0, 0]  # tool results, reasoning, chars removed, texts shortened
    for index, message in enumerate(messages):
        if index >= boundary or message.get("role") == "system" and not small_window:
            pruned.append(message)
            continue
        if message.get("role") == "system":
            entry, counts = prune_block(message)
        else:
            entry, counts = prune_entry(message, small_window)
        totals = [total + count for total, count in zip(totals, counts, strict=True)]
        if entry is not None:
            pruned.append(entry)
    return pruned, PruneStats(*totals)


def is_block(message: dict[str, Any]) -> bool:
    """Whether `message` is a context block (`core.context.request.render_dynamic`)."""
    content = message.get("content")
    return message.get("role") == "system" and str(content or "").startswith(DYNAMIC_HEADER)


def prune_block(message: dict[str, Any]) -> tuple[dict[str, Any] | None, list[int]]:
    """An old context block without its `TRANSIENT_SECTIONS` (None when nothing else is
    left in it); any other system message as it is."""
    content = message.get("content")
    if not is_block(message) or not isinstance(content, str):
        return message, [0, 0, 0, 0]
    kept = _TRANSIENT.sub("", content)
    if kept == content:
        return message, [0, 0, 0, 0]
    removed = len(content) - len(kept)
    if not kept[len(DYNAMIC_HEADER) :].strip():
        return None, [0, 0, len(content), 1]
    return message | {"content": DYNAMIC_HEADER + kept[len(DYNAMIC_HEADER) :].lstrip("\n")}, [
        0, 0, removed, 1,
    ]  # fmt: skip


def prune_entry(message: dict[str, Any], small_window: bool) -> tuple[dict[str, Any], list[int]]:
    """A pruned copy of one old message and what was pruned from it (as in `PruneStats`)."""
    entry = dict(message)
    content = entry.get("content")
    tools = reasoning = removed = texts = 0
    if entry.get("role") == "tool" and isinstance(content, str):
        if len(content) > STUB_CHARS + 40:
            entry["content"] = stub_tool_result(content)
            tools = 1
            removed += len(content) - len(entry["content"])
    elif entry.get("role") == "assistant":
        dropped = [key for key in REASONING_KEYS if key in entry]
        for key in dropped:
            removed += len(str(entry.pop(key)))
        if isinstance(content, str) and strip_think(content) != content.strip():
            entry["content"] = strip_think(content)
            removed += len(content) - len(entry["content"])
            dropped.append("think")
        reasoning = int(bool(dropped))
    text = entry.get("content")
    chat_text = entry.get("role") in ("user", "assistant")
    if small_window and chat_text and isinstance(text, str) and len(text) > CHAT_STUB_CHARS + 40:
        entry["content"] = shorten_text(text)
        texts = 1
        removed += len(text) - len(entry["content"])
    return entry, [tools, reasoning, removed, texts]
