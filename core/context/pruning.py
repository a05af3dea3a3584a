"""Request-time pruning: stub old tool results and drop old reasoning, in the request only.

Works on copies of the request messages; the stored history is never touched. On a small
window the old user and assistant texts are shortened to their head too, and old context
blocks lose their `recalled` sections.

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
# messages the recall index found (`conversation_search` finds them again). On a small
# window a block before the boundary loses them, as old turns lose their texts; memories
# and notes stay.
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
    messages: Sequence[dict[str, Any]],
    boundary: int,
    small_window: bool = False,
    recalled_until: int = 0,
) -> tuple[list[dict[str, Any]], PruneStats]:
    """A copy of `messages` with each message before `boundary` pruned (`pruned_message`),
    and the context blocks from there up to `recalled_until` without their recalled lines."""
    recalled_until = max(recalled_until, boundary)
    kept: list[dict[str, Any]] = []
    totals = [0, 0, 0, 0]  # tool results, reasoning, chars removed, texts shortened
    for index, message in enumerate(messages[:recalled_until]):
        if index < boundary:
            entry, counts = pruned_message(message, small_window)
        else:
            entry, counts = prune_block(message)
        totals = [total + count for total, count in zip(totals, counts, strict=True)]
        if entry is not None:
            kept.append(entry)
    return kept + list(messages[recalled_until:]), PruneStats(*totals)


def pruned_message(
    message: dict[str, Any], small_window: bool
) -> tuple[dict[str, Any] | None, list[int]]:
    """One message before the boundary as the request sends it (None: left out) and what
    was pruned from it (as in `PruneStats`). A block loses its recalled lines on a small
    window only: on a larger one they stay in view, where later questions find them."""
    if message.get("role") == "system":
        return prune_block(message) if small_window else (message, [0, 0, 0, 0])
    return prune_entry(message, small_window)


@dataclass(frozen=True)
class FillLevels:
    """Estimated tokens that decide where the pruned part ends (`fill_start`)."""

    fixed: int  # not in the messages: the offered tools' schemas, images
    prune: int  # past this the boundaries move, if that leaves room for a fill (`low`)
    compact: int  # past this they move if that brings the request under (else it compacts)

    @property
    def low(self) -> int:
        """Where a move past `prune` must bring the request: as far under `prune` as
        `compact` is over it, so the next fill is at least that gap (else moves would
        come every turn or two once the pruned part itself nears `prune`)."""
        return 2 * self.prune - self.compact


@dataclass(frozen=True)
class Fill:
    """Where a request's pruned parts end: messages before `start` are pruned (the turns
    before the protected ones), blocks before `recalled_until` lose their recalled lines
    (every block but the newest turn's, as of the last move). (0, 0): nothing pruned."""

    start: int = 0
    recalled_until: int = 0


class _Sizes:
    """Prefix sums of a request's characters and messages, as they are, pruned, and with
    only the blocks' recalled lines dropped; `tokens` estimates as `estimator.request`."""

    def __init__(
        self, messages: Sequence[dict[str, Any]], small_window: bool, estimator: TokenEstimator
    ) -> None:
        self.estimator = estimator
        self.full, self.short, self.bare = [0], [0], [0]  # characters of messages[:i]
        self.short_count, self.bare_count = [0], [0]  # messages of messages[:i] left
        for message in messages:
            short, _ = pruned_message(message, small_window)
            bare, _ = prune_block(message)
            self.full.append(self.full[-1] + message_chars(message))
            self.short.append(self.short[-1] + (message_chars(short) if short else 0))
            self.bare.append(self.bare[-1] + (message_chars(bare) if bare else 0))
            self.short_count.append(self.short_count[-1] + (short is not None))
            self.bare_count.append(self.bare_count[-1] + (bare is not None))

    def tokens(self, fill: Fill, end: int) -> int:
        start, until = fill.start, max(fill.start, min(fill.recalled_until, end))
        chars = self.short[start] + self.bare[until] - self.bare[start]
        chars += self.full[end] - self.full[until]
        count = self.short_count[start] + self.bare_count[until] - self.bare_count[start]
        return self.estimator.chars(chars) + overhead_tokens(count + end - until)


def fill_start(
    messages: Sequence[dict[str, Any]],
    protect_turns: int,
    estimator: TokenEstimator,
    levels: FillLevels,
    small_window: bool = False,
    previous: Fill | None = None,
) -> Fill:
    """Where the pruned parts of `messages` end. From the `previous` request's, the
    newest user message decides: they stay while the request fits `levels.prune`; past
    it, they move (the turns before the newest `protect_turns` pruned, on a small window
    every older block without its recalled lines) when that brings the request under
    `levels.low`, or when
    the request passes `compact` and moving brings it under (moving is then the
    alternative to a compaction; when even that would not fit, nothing moves and the
    request compacts). So they move once per fill of the window, one prefix break. Without
    `previous` (a new process, the first request after a compaction) the decision is
    replayed over every user message as each was the newest. Requests are estimated as
    `estimator.request` does, so a move and a compaction agree."""
    sizes = _Sizes(messages, small_window, estimator)
    users = [index for index, message in enumerate(messages) if message.get("role") == "user"]
    fill = previous or Fill()
    deciding = list(enumerate(users))
    if previous is not None:
        deciding = deciding[-1:]
    for number, user in deciding:
        total = levels.fixed + sizes.tokens(fill, user + 1)
        if total <= levels.prune:
            continue
        protected = with_its_block(messages, users[max(0, number - protect_turns + 1)])
        recalled = with_its_block(messages, user) if small_window else 0
        moved = Fill(max(fill.start, protected), recalled)
        if moved == fill:
            continue
        after = levels.fixed + sizes.tokens(moved, user + 1)
        if after < total and (after <= levels.low or total > levels.compact >= after):
            fill = moved
    return fill


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
