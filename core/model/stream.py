"""Reading a streamed chat completion: the server's SSE chunks assembled into one
`Completion`, with the visible text handed on as it grows.

Content deltas add to the text; tool-call deltas are joined by their `index` into whole
calls; reasoning (`reasoning_content` deltas, `<think>…</think>` in the content) is never
shown, even when a tag is split across chunks. Usage comes from the final chunk (sent
when the request asks for `stream_options.include_usage`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from core.model.completion import Completion, ToolCall

TextSink = Callable[[str], Awaitable[None]]
"""Called with the whole visible text so far, each time it grew."""

INTERRUPTED = "interrupted"  # the finish reason of a stream that broke after some text
_OPEN_TAGS = ("<think>", "<thinking>", "<reasoning>")


class ThinkFilter:
    """Drops `<think>`/`<thinking>`/`<reasoning>` blocks from text fed piece by piece.

    A piece that ends in what may be the start of a tag is held back until the next
    piece says what it is, so a tag split across chunks never shows.
    """

    def __init__(self) -> None:
        self._held = ""
        self._closing: str | None = None  # the closing tag awaited inside a block

    def feed(self, piece: str) -> str:
        """The visible text `piece` adds (possibly empty)."""
        text = self._held + piece
        self._held = ""
        shown: list[str] = []
        while text:
            if self._closing is not None:
                end = text.lower().find(self._closing)
                if end < 0:
                    self._held = _partial_suffix(text, (self._closing,))
                    return "".join(shown)
                text = text[end + len(self._closing) :]
                self._closing = None
                continue
            start, tag = _first_tag(text)
            if start < 0:
                keep = _partial_suffix(text, _OPEN_TAGS)
                shown.append(text[: len(text) - len(keep)])
                self._held = keep
                break
            shown.append(text[:start])
            text = text[start + len(tag) :]
            self._closing = "</" + tag[1:]
        return "".join(shown)

    def flush(self) -> str:
        """What was held back at the end of the stream (never the inside of a block)."""
        held, self._held = self._held, ""
        return "" if self._closing is not None else held


def _first_tag(text: str) -> tuple[int, str]:
    lowered = text.lower()
    found = [(lowered.find(tag), tag) for tag in _OPEN_TAGS if tag in lowered]
    return min(found) if found else (-1, "")


def _partial_suffix(text: str, tags: tuple[str, ...]) -> str:
    """The end of `text` that could be the start of one of `tags`."""
    lowered = text.lower()
    for size in range(min(len(text), max(len(tag) for tag in tags) - 1), 0, -1):
        if any(tag.startswith(lowered[-size:]) for tag in tags):
            return text[-size:]
    return ""


@dataclass
class _CallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAssembler:
    """The state of one streamed answer, fed one decoded SSE chunk at a time."""

    raw: list[str] = field(default_factory=list)  # content as sent (think blocks too)
    visible: str = ""
    calls: dict[int, _CallParts] = field(default_factory=dict)
    model: str = ""
    finish_reason: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    think: ThinkFilter = field(default_factory=ThinkFilter)

    def feed(self, chunk: Any) -> bool:
        """Take one chunk; True when the visible text grew."""
        if not isinstance(chunk, dict):
            return False
        self.model = self.model or str(chunk.get("model") or "")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = _count(usage.get("prompt_tokens"))
            self.completion_tokens = _count(usage.get("completion_tokens"))
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return False
        choice = choices[0]
        self.finish_reason = str(choice.get("finish_reason") or self.finish_reason)
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return False
        self._feed_calls(delta.get("tool_calls"))
        content = delta.get("content")
        if not isinstance(content, str) or not content:
            return False
        self.raw.append(content)
        added = self.think.feed(content)
        self.visible += added
        return bool(added)

    def _feed_calls(self, deltas: Any) -> None:
        for position, delta in enumerate(deltas if isinstance(deltas, list) else []):
            if not isinstance(delta, dict):
                continue
            index = delta.get("index")
            key = index if isinstance(index, int) else position
            parts = self.calls.setdefault(key, _CallParts())
            parts.id = parts.id or str(delta.get("id") or "")
            function = delta.get("function")
            if isinstance(function, dict):
                parts.name += str(function.get("name") or "")
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    parts.arguments.append(arguments)
                elif isinstance(arguments, dict):
                    parts.arguments.append(json.dumps(arguments))

    def completion(self, latency_ms: int, interrupted: bool = False) -> Completion:
        """The assembled answer; an interrupted one keeps only what was shown."""
        self.visible += self.think.flush()
        calls = [
            ToolCall(parts.id or f"call_{index}", parts.name, "".join(parts.arguments) or "{}")
            for index, parts in sorted(self.calls.items())
            if parts.name
        ]
        return Completion(
            content=self.visible if interrupted else "".join(self.raw),
            tool_calls=[] if interrupted else calls,
            model=self.model,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            latency_ms=latency_ms,
            finish_reason=INTERRUPTED if interrupted else self.finish_reason,
        )


def sse_data(line: str) -> str | None:
    """The payload of an SSE `data:` line; None for any other line (comments, events)."""
    if not line.startswith("data:"):
        return None
    return line[5:].strip()


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
