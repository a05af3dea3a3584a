"""Server-sent events for the fake OpenAI server: a scripted reply as the chunks a real
server streams (`stream: true`), at a set token rate, optionally cut half-way.

Chunks follow OpenAI's shape: a role delta, `reasoning_content` deltas (as llama.cpp and
vLLM send reasoning), content deltas, each tool call as a head (id, name) and its
arguments in two deltas by `index`, a finish chunk, a usage chunk when the request asks
for `stream_options.include_usage`, then `data: [DONE]`.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Protocol

_TOKEN = re.compile(r"\s*\S+|\s+")


class ReplyLike(Protocol):
    content: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    completion_tokens: int
    reasoning: str
    pieces: list[str] | None


@dataclass(frozen=True)
class StreamEvent:
    """One SSE event and whether it carries a token (paced at the token rate)."""

    data: str
    token: bool = False


def tokens(text: str) -> list[str]:
    """`text` as the pieces a server would stream: one word (with its leading space) each."""
    return _TOKEN.findall(text)


def stream_events(
    request: dict[str, Any], reply: ReplyLike, prompt_tokens: int
) -> list[StreamEvent]:
    """The SSE events of `reply` streamed as an answer to `request`."""
    model = request.get("model", "fake-model")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> StreamEvent:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        body = {"object": "chat.completion.chunk", "model": model, "choices": [choice]}
        return StreamEvent(json.dumps(body), token=bool(delta.get("content")))

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"reasoning_content": piece}) for piece in tokens(reply.reasoning)]
    pieces = reply.pieces if reply.pieces is not None else tokens(reply.content)
    events += [chunk({"content": piece}) for piece in pieces]
    for index, call in enumerate(reply.tool_calls):
        function = call["function"]
        head = {"index": index, "id": call["id"], "type": "function",
                "function": {"name": function["name"], "arguments": ""}}  # fmt: skip
        arguments = str(function["arguments"])
        half = len(arguments) // 2
        events.append(chunk({"tool_calls": [head]}))
        for part in (arguments[:half], arguments[half:]):
            argument = {"index": index, "function": {"arguments": part}}
            events.append(chunk({"tool_calls": [argument]}))
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    events.append(chunk({}, finish))
    if (request.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": reply.completion_tokens,
                 "total_tokens": prompt_tokens + reply.completion_tokens}  # fmt: skip
        events.append(StreamEvent(json.dumps({"model": model, "choices": [], "usage": usage})))
    events.append(StreamEvent("[DONE]"))
    return events


def write_events(
    wfile: Any,
    events: list[StreamEvent],
    tokens_per_s: float,
    cut_after: int | None,
    times: list[float] | None = None,
) -> None:
    """Write `events` to an open response, a token every 1/`tokens_per_s` s; stop (the
    connection then closes) after `cut_after` tokens. `times` gets when each token went."""
    sent = 0
    for event in events:
        if event.token and cut_after is not None and sent >= cut_after:
            return
        if event.token and tokens_per_s > 0 and sent:
            time.sleep(1 / tokens_per_s)
        wfile.write(f"data: {event.data}\n\n".encode())
        wfile.flush()
        sent += event.token
        if event.token and times is not None:
            times.append(time.monotonic())
