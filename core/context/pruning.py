"""Request-time pruning: stub old tool results and drop old reasoning, in the request only.

Works on copies of the request messages; the stored history is never touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.text import strip_think

STUB_CHARS = 200
REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")


@dataclass(frozen=True)
class PruneStats:
    tool_results_pruned: int = 0
    reasoning_dropped: int = 0
    chars_removed: int = 0

    @property
    def pruned(self) -> bool:
        return bool(self.tool_results_pruned or self.reasoning_dropped)


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
    messages: Sequence[dict[str, Any]], protect_turns: int
) -> tuple[list[dict[str, Any]], PruneStats]:
    """A pruned copy of `messages`: tool results and reasoning before the protected turns."""
    boundary = protected_start(messages, protect_turns)
    pruned: list[dict[str, Any]] = []
    tools = reasoning = removed = 0
    for index, message in enumerate(messages):
        if index >= boundary:
            pruned.append(message)
            continue
        entry = dict(message)
        content = entry.get("content")
        if entry.get("role") == "tool" and isinstance(content, str):
            if len(content) > STUB_CHARS + 40:
                entry["content"] = stub_tool_result(content)
                tools += 1
                removed += len(content) - len(entry["content"])
        elif entry.get("role") == "assistant":
            dropped = [key for key in REASONING_KEYS if key in entry]
            for key in dropped:
                removed += len(str(entry.pop(key)))
            if isinstance(content, str) and strip_think(content) != content.strip():
                entry["content"] = strip_think(content)
                removed += len(content) - len(entry["content"])
                dropped.append("think")
            reasoning += bool(dropped)
        pruned.append(entry)
    return pruned, PruneStats(tools, reasoning, removed)
