"""Request-time pruning: stub old tool results and drop old reasoning, in the request only.

Works on copies of the request messages; the stored history is never touched. On a small
window the old user and assistant texts are shortened to their head too. Old context
blocks lose their `recalled` sections on every window.

Where the pruned part ends (`fill_start`) moves once per fill of the window, not once per
turn: the boundary stays where it was while the request with it fits, so each request
starts with the whole previous one and a server's KV cache serves it; only when the
request would pass the compaction level (or the prune level, if moving brings it back
under) does the boundary move to the newest protected turns, one prefix break that makes
room for many turns. The boundary is replayed over the user messages of the request, so
every request finds the previous one's boundary without any stored state.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.context.request import DYNAMIC_HEADER
from core.model.tokens import TokenEstimator, message_chars, overhead_tokens
from core.text import strip_think

STUB_CHARS = 200
REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")


CHAT_STUB_CHARS = 80
# Sections of a context block that serve the turn they were built for: copies of earlier
# messages the recall index found (`conversation_search` finds them again). A block before
# the pruning boundary loses them, as old turns lose their texts; memories and notes stay.
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


def with_its_block(messages: Sequence[dict[str, Any]], boundary: int) -> int:
    """`boundary` moved before the context block of the user message it starts at: a
    protected user message keeps the block sent with it."""
    if 0 < boundary < len(messages) and is_block(messages[boundary - 1]):
        return boundary - 1
    return boundary


def prune_request(
    messages: Sequence[dict[str, Any]], protect_turns: int, small_window: bool = False
) -> tuple[list[dict[str, Any]], PruneStats]:
    """A pruned copy of `messages`: tool results, reasoning and old blocks' recalled lines
    before the protected turns; on a `small_window` their user and assistant texts too
    (the tail moves in steps)."""
    if small_window:
        boundary = stepped_start(messages, protect_turns)
    else:
        boundary = protected_start(messages, protect_turns)
    return prune_before(messages, with_its_block(messages, boundary), small_window)


def prune_before(
    messages: Sequence[dict[str, Any]], boundary: int, small_window: bool = False
) -> tuple[list[dict[str, Any]], PruneStats]:
    """A copy of `messages` with each message before `boundary` pruned (`pruned_message`)."""
    pruned: list[dict[str, Any]] = list(messages[boundary:])
    head: list[dict[str, Any]] = []
    totals = [0, 0, 0, 0]  # tool results, reasoning, chars removed, texts shortened
    for message in messages[:boundary]:
        entry, counts = pruned_message(message, small_window)
        totals = [total + count for total, count in zip(totals, counts, strict=True)]
        if entry is not None:
            head.append(entry)
    return head + pruned, PruneStats(*totals)


def pruned_message(
    message: dict[str, Any], small_window: bool
) -> tuple[dict[str, Any] | None, list[int]]:
    """One message before the boundary as the request sends it (None: left out) and what
    was pruned from it (as in `PruneStats`)."""
    if message.get("role") == "system":
        return prune_block(message)
    return prune_entry(message, small_window)


@dataclass(frozen=True)
class FillLevels:
    """Estimated tokens that decide where the pruned part ends (`fill_start`)."""

    fixed: int  # not in the messages: the tools' budget when their schemas reach the prompt
    prune: int  # past this the boundary moves, if moving brings the request back under it
    compact: int  # past this it moves anyway (the request would compact otherwise)


def fill_start(
    messages: Sequence[dict[str, Any]],
    protect_turns: int,
    estimator: TokenEstimator,
    levels: FillLevels,
    small_window: bool = False,
    previous: int | None = None,
) -> int:
    """Where the pruned part of `messages` ends (0: nothing pruned). From the `previous`
    request's boundary, the newest user message decides: the boundary stays while the
    request fits `levels.prune`; past it, it moves to the newest `protect_turns` turns
    when that brings the request back under `prune`, or when the request passes `compact`
    and moving brings it under (moving is then the alternative to a compaction; when even
    that would not fit, it stays and the request compacts). So it moves once per fill of
    the window. Without `previous` (a new process, the first request after a compaction)
    the decision is replayed over every user message as each was the newest. Requests
    are estimated as `estimator.request` does, so a move and a compaction agree."""
    full = [0]  # characters of messages[:i] as they are
    short = [0]  # ... and pruned
    kept = [0]  # messages of messages[:i] left once pruned
    for message in messages:
        entry, _ = pruned_message(message, small_window)
        full.append(full[-1] + message_chars(message))
        short.append(short[-1] + (message_chars(entry) if entry is not None else 0))
        kept.append(kept[-1] + (entry is not None))

    def tokens(start: int, end: int) -> int:
        chars = short[start] + full[end] - full[start]
        return levels.fixed + estimator.chars(chars) + overhead_tokens(kept[start] + end - start)

    users = [index for index, message in enumerate(messages) if message.get("role") == "user"]
    start = previous or 0
    deciding = list(enumerate(users))
    if previous is not None:
        deciding = deciding[-1:]
    for number, user in deciding:
        total = tokens(start, user + 1)
        if total <= levels.prune:
            continue
        moved = with_its_block(messages, users[max(0, number - protect_turns + 1)])
        if moved <= start:
            continue
        after = tokens(moved, user + 1)
        if after <= levels.prune or total > levels.compact >= after:
            start = moved
    return start


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
