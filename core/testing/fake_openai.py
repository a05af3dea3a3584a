"""A fake OpenAI-compatible server on 127.0.0.1 for tests and benchmarks.

It speaks real HTTP (chat completions, models), so the real `openai` client runs
against it. Replies come from a script (`FakeOpenAIServer.script`), else from the
`responder` function, which by default echoes the newest user message.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from core.testing.loopback import JsonHandler, LoopbackServer


@dataclass
class FakeReply:
    """One scripted answer. `status` other than 200 sends an error body instead."""

    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    error: str = ""
    delay_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int = 5
    raw_body: str | None = None


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "") -> dict[str, Any]:
    """A tool call as the OpenAI API returns it."""
    return {
        "id": call_id or f"call_{name}_{abs(hash(json.dumps(arguments))) % 10_000}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def echo_responder(request: dict[str, Any]) -> FakeReply:
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    last = users[-1]["content"] if users else ""
    return FakeReply(content=f"echo: {last}")


class FakeOpenAIServer(LoopbackServer):
    """Start with `with FakeOpenAIServer() as server:`; `server.base_url` ends in /v1."""

    def __init__(self, responder: Callable[[dict[str, Any]], FakeReply] = echo_responder) -> None:
        self.script: deque[FakeReply] = deque()
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        super().__init__(self._handler_class())

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def add(self, *replies: FakeReply) -> None:
        with self._lock:
            self.script.extend(replies)

    def next_reply(self, request: dict[str, Any]) -> FakeReply:
        with self._lock:
            self.requests.append(request)
            if self.script:
                return self.script.popleft()
        return self.responder(request)

    def _handler_class(self) -> type[JsonHandler]:
        server = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    body = {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}
                    self.send_json(200, json.dumps(body))
                else:
                    self.send_json(404, json.dumps({"error": {"message": "not found"}}))

            def do_POST(self) -> None:
                request = json.loads(self.read_body() or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self.send_json(404, json.dumps({"error": {"message": "not found"}}))
                    return
                reply = server.next_reply(request)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.raw_body is not None:
                    self.send_json(reply.status, reply.raw_body)
                elif reply.status != 200:
                    error = {"message": reply.error or "fake error", "type": "fake", "code": None}
                    self.send_json(reply.status, json.dumps({"error": error}))
                else:
                    self.send_json(200, json.dumps(completion_body(request, reply)))

        return Handler


def completion_body(request: dict[str, Any], reply: FakeReply) -> dict[str, Any]:
    prompt_chars = len(json.dumps(request.get("messages", [])))
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else prompt_chars // 4
    return {
        "id": f"chatcmpl-{int(time.time() * 1000)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "fake-model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": prompt_tokens + reply.completion_tokens,
        },
    }


@contextmanager
def running_fake_server(
    responder: Callable[[dict[str, Any]], FakeReply] = echo_responder,
) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(responder) as server:
        yield server
