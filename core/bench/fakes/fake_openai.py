"""A fake OpenAI-compatible server on 127.0.0.1 for tests and benchmarks.

It speaks real HTTP (chat completions, models), so Mnemo's own client runs against it.
Replies come from a script (`FakeOpenAIServer.script`), else from the `responder`
function, which by default echoes the newest user message.

`ServerTraits` make it behave like the local servers Mnemo meets, with their real error
texts: a context window enforced as llama-cpp-python does (400 `context_length_exceeded`
once the prompt reaches `n_ctx`; its error adds `max_tokens` to the tokens requested), a
chat template that refuses a late system message (500, as a Mistral-style template
raises), a model without tool support (400, as Ollama answers), a server without
`json_schema` structured output (500, llama-cpp-python's validation error), a template
that drops the tool schemas from the prompt, llama.cpp's `/props`, vLLM's
`max_model_len` and Ollama's `/api/tags`, `/api/show`, `/api/ps` and "not found, try
pulling it first".
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

from core.bench.fakes.chat_formats import rendered_prompt_tokens
from core.bench.fakes.fake_stream import stream_events, write_events
from core.bench.fakes.loopback import JsonHandler, LoopbackServer

NOT_FOUND = json.dumps({"error": {"message": "not found"}})


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
    finish_reason: str = ""  # default: "tool_calls" with tool calls, else "stop"
    # Streaming (`stream: true`): the pace, a cut after that many tokens, reasoning deltas,
    # the content's pieces as sent (default: word by word).
    tokens_per_s: float = 0.0
    cut_after: int | None = None
    reasoning: str = ""
    pieces: list[str] | None = None


@dataclass
class OllamaTraits:
    """Ollama's own API beside /v1: /api/show and /api/ps."""

    num_ctx: int | None = None  # a `num_ctx` parameter in the model's Modelfile
    running_ctx: int | None = None  # the loaded model's context_length in /api/ps
    tools: bool = True  # "tools" among the model's capabilities


@dataclass
class ServerTraits:
    """How the fake server behaves beyond the script (all off by default)."""

    n_ctx: int | None = None  # enforce a window (prompt tokens ~ chars / 4)
    props: bool = False  # answer llama.cpp's GET /props with n_ctx
    strict_system: bool = False  # 500 on a system message after the first
    no_tools: bool = False  # 400 on any request with tools
    no_json_schema: bool = False  # 500 on response_format json_schema
    served: tuple[str, ...] = ("fake-model",)  # the /v1/models list
    max_model_len: int | None = None  # vLLM's field in /v1/models
    ollama: OllamaTraits | None = None  # also answer /api/show and /api/ps
    tools_dropped: bool = False  # like a template that ignores tools: not in prompt_tokens
    # "chatml-function-calling": the prompt counted as llama-cpp-python renders it (the
    # tools written into every system message, `core.bench.fakes.chat_formats`)
    chat_format: str = ""
    stream: str = "sse"  # on `stream: true`: "sse", "refuse" (400) or "json" (a whole answer)
    no_stream_options: bool = False  # 400 on `stream_options` (older OpenAI-compatible servers)
    no_vision: bool = False  # 500 on an image part, as llama.cpp's server without an mmproj

    def models_body(self) -> dict[str, Any]:
        names = self.ollama_names() if self.ollama else list(self.served)
        entries: list[dict[str, Any]] = [{"id": name, "object": "model"} for name in names]
        if self.max_model_len:
            for entry in entries:
                entry["max_model_len"] = self.max_model_len
        return {"object": "list", "data": entries}

    def ollama_show(self, model: str) -> tuple[int, dict[str, Any]]:
        if self.ollama is None or model.removesuffix(":latest") not in self.served:
            return 404, {"error": f"model '{model}' not found"}
        parameters = f"num_ctx {self.ollama.num_ctx}" if self.ollama.num_ctx else ""
        capabilities = ["completion", *(["tools"] if self.ollama.tools else [])]
        info = {"llama.context_length": 131072}
        return 200, {"parameters": parameters, "capabilities": capabilities, "model_info": info}

    def ollama_names(self) -> list[str]:
        """The pulled models, named as Ollama lists them (`name:tag`)."""
        return [name if ":" in name else f"{name}:latest" for name in self.served]

    def ollama_tags(self) -> dict[str, Any]:
        names = self.ollama_names()
        return {"models": [{"name": name, "model": name, "size": 2_019_393_189} for name in names]}

    def ollama_ps(self) -> dict[str, Any]:
        if self.ollama is None or not self.ollama.running_ctx:
            return {"models": []}
        loaded = self.served[0]
        return {"models": [{"name": f"{loaded}:latest", "context_length": self.ollama.running_ctx}]}

    def prompt_tokens(self, request: dict[str, Any]) -> int:
        """The prompt's tokens as this server counts them."""
        if self.chat_format == "chatml-function-calling":
            return rendered_prompt_tokens(request)
        return prompt_tokens_of(request, self.tools_dropped)

    def refusal(self, request: dict[str, Any]) -> tuple[int, str] | None:
        """The error a real server would send for `request`, if any."""
        messages = request.get("messages", [])
        model = str(request.get("model", ""))
        if self.ollama is not None and model.removesuffix(":latest") not in self.served:
            return 404, f'model "{model}" not found, try pulling it first'
        roles = [message.get("role") for message in messages]
        if self.strict_system and "system" in roles[1:]:
            return 500, "System message must be at the beginning."
        if self.no_tools and request.get("tools"):
            model = request.get("model", "fake-model")
            return 400, f"registry.ollama.ai/library/{model} does not support tools"
        response_format = request.get("response_format") or {}
        if self.no_json_schema and response_format.get("type") == "json_schema":
            return 500, (
                "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', "
                "'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}"
            )
        if self.no_vision and any(isinstance(m.get("content"), list) for m in messages):
            return 500, "image input is not supported - hint: you may need to provide the mmproj"
        if self.no_stream_options and "stream_options" in request:
            return 400, "Unrecognized request argument supplied: stream_options"
        if self.stream == "refuse" and request.get("stream"):
            return 400, "streaming is not supported by this server"
        if self.n_ctx is not None:
            prompt = self.prompt_tokens(request)
            completion = int(request.get("max_tokens") or 16)
            if prompt >= self.n_ctx:  # as llama-cpp-python: a longer answer is just cut
                return 400, (
                    f"This model's maximum context length is {self.n_ctx} tokens. However, "
                    f"you requested {prompt + completion} tokens ({prompt} in the messages, "
                    f"{completion} in the completion). Please reduce the length of the "
                    "messages or completion."
                )
        return None


def prompt_tokens_of(request: dict[str, Any], tools_dropped: bool = False) -> int:
    """The fake tokenizer: four characters of the messages (and tools) per token; an image
    part as a vision model counts it (a token per 28-pixel patch, not its base64)."""
    messages, images = _without_images(request.get("messages", []))
    chars = len(json.dumps(messages))
    counted = not tools_dropped and request.get("tool_choice") not in (None, "none")
    if request.get("tools") and counted:
        chars += len(json.dumps(request["tools"]))
    return chars // 4 + images


def _without_images(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """`messages` with their image parts taken out, and the tokens those parts cost."""
    from core.chat.images import DATA_URL_PREFIX, ImagePart, image_tokens

    kept, tokens = [], 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                url = str(part.get("image_url", {}).get("url", ""))
                if part.get("type") == "image_url" and url.startswith(DATA_URL_PREFIX):
                    size = _image_size(url.removeprefix(DATA_URL_PREFIX))
                    tokens += image_tokens(ImagePart("", *size))
                else:
                    parts.append(part)
            message = {**message, "content": parts}
        kept.append(message)
    return kept, tokens


def _image_size(data: str) -> tuple[int, int]:
    import base64
    import io

    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(data))) as picture:
        return picture.size


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "") -> dict[str, Any]:
    """A tool call as the OpenAI API returns it."""
    return {
        "id": call_id or f"call_{name}_{abs(hash(json.dumps(arguments))) % 10_000}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def echo_responder(request: dict[str, Any]) -> FakeReply:
    """`echo: <the last user message>`; of a message with image parts, its text and how
    many images it carried (as a vision model describes, never the bytes)."""
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    last = users[-1]["content"] if users else ""
    if isinstance(last, list):
        texts = [str(part.get("text", "")) for part in last if part.get("type") == "text"]
        images = sum(1 for part in last if part.get("type") == "image_url")
        last = f"{' '.join(texts)} (saw {images} image{'s' if images != 1 else ''})"
    return FakeReply(content=f"echo: {last}")


class FakeOpenAIServer(LoopbackServer):
    """Start with `with FakeOpenAIServer() as server:`; `server.base_url` ends in /v1."""

    def __init__(
        self,
        responder: Callable[[dict[str, Any]], FakeReply] = echo_responder,
        traits: ServerTraits | None = None,
    ) -> None:
        self.script: deque[FakeReply] = deque()
        self.responder = responder
        self.traits = traits or ServerTraits()
        self.refused: list[tuple[int, str]] = []
        self.requests: list[dict[str, Any]] = []
        self.token_times: list[list[float]] = []  # per streamed answer: when each token went
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
                self.send_json(*server.answer_get(self.path.rstrip("/")))

            def do_POST(self) -> None:
                request = json.loads(self.read_body() or b"{}")
                answer = server.answer_post(self.path.rstrip("/"), request)
                if isinstance(answer, FakeReply):
                    self.send_stream(request, answer)
                else:
                    self.send_json(*answer)

            def send_stream(self, request: dict[str, Any], reply: FakeReply) -> None:
                prompt = reply.prompt_tokens
                if prompt is None:
                    prompt = server.traits.prompt_tokens(request)
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    events = stream_events(request, reply, prompt)
                    times: list[float] = []
                    server.token_times.append(times)
                    write_events(self.wfile, events, reply.tokens_per_s, reply.cut_after, times)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading

        return Handler

    def answer_get(self, path: str) -> tuple[int, str]:
        """(status, JSON body) for a GET: llama.cpp's /props, /models, Ollama's own API."""
        traits = self.traits
        if path == "/props" and traits.props:
            settings = {"n_ctx": traits.n_ctx or 4096}
            return 200, json.dumps({"default_generation_settings": settings, "total_slots": 1})
        if path.endswith("/models"):
            return 200, json.dumps(traits.models_body())
        if path == "/api/version" and traits.ollama:
            return 200, json.dumps({"version": "0.12.0"})
        if path == "/api/ps" and traits.ollama:
            return 200, json.dumps(traits.ollama_ps())
        if path == "/api/tags" and traits.ollama:
            return 200, json.dumps(traits.ollama_tags())
        return 404, NOT_FOUND

    def answer_post(self, path: str, request: dict[str, Any]) -> tuple[int, str] | FakeReply:
        """(status, JSON body) for a POST: a chat completion (the next scripted reply, or
        the refusal the server's traits call for), or Ollama's /api/show; the reply itself
        when it is to be streamed."""
        if path == "/api/show" and self.traits.ollama:
            status, shown = self.traits.ollama_show(str(request.get("model", "")))
            return status, json.dumps(shown)
        if not path.endswith("/chat/completions"):
            return 404, NOT_FOUND
        refusal = self.traits.refusal(request)
        if refusal is not None:
            with self._lock:
                self.requests.append(request)
                self.refused.append(refusal)
            overflow = "maximum context length" in refusal[1]
            error: dict[str, str | None] = {
                "message": refusal[1],
                "type": "invalid_request_error",
                "code": "context_length_exceeded" if overflow else None,
            }
            return refusal[0], json.dumps({"error": error})
        reply = self.next_reply(request)
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.raw_body is not None:
            return reply.status, reply.raw_body
        if reply.status != 200:
            error = {"message": reply.error or "fake error", "type": "fake", "code": None}
            return reply.status, json.dumps({"error": error})
        if request.get("stream") and self.traits.stream == "sse":
            return reply
        prompt = self.traits.prompt_tokens(request)
        return 200, json.dumps(completion_body(request, reply, prompt=prompt))


def completion_body(
    request: dict[str, Any],
    reply: FakeReply,
    tools_dropped: bool = False,
    prompt: int | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    prompt_tokens = reply.prompt_tokens
    if prompt_tokens is None:
        prompt_tokens = prompt if prompt is not None else prompt_tokens_of(request, tools_dropped)
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    return {
        "id": f"chatcmpl-{int(time.time() * 1000)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "fake-model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish,
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
    traits: ServerTraits | None = None,
) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(responder, traits) as server:
        yield server
