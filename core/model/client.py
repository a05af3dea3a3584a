"""The model client: one async `complete()` against any OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import time
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from core.config import LLMConfig
from core.errors import (
    AnswerNotJSON,
    ContextOverflow,
    FormatUnsupported,
    LLMBadResponse,
    LLMError,
    LLMRejected,
    LLMTimeout,
    LLMUnavailable,
    ModelMissing,
    TemplateRejected,
    ToolsUnsupported,
)
from core.model.completion import Completion as Completion  # re-exported: callers import it here
from core.model.completion import ToolCall as ToolCall
from core.model.stream import StreamAssembler, TextSink, sse_data
from core.text import strip_think

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

_OVERFLOW_HINTS = (
    "context_length_exceeded",
    "context length",
    "maximum context",
    "context window",
    "context size",
    "exceed_context_size",
    "too many tokens",
    "prompt is too long",
)
# The window an overflow error states: OpenAI, vLLM and llama-cpp-python ("maximum context
# length is 2048 tokens"), llama.cpp's server ("n_ctx": 4096), others ("context size (4096)").
_LIMIT_PATTERNS = (
    re.compile(r"maximum context length is (\d+)", re.IGNORECASE),
    re.compile(r"\bn_ctx\b\W{0,4}(\d+)", re.IGNORECASE),
    re.compile(r"context (?:size|length|window) (?:of |is )?\(?(\d{3,7})\b", re.IGNORECASE),
)
# The prompt's tokens an overflow error states: OpenAI and llama-cpp-python ("(2116 in the
# messages, 128 in the completion)"), llama.cpp's server ("n_prompt_tokens": 2116).
_PROMPT_PATTERNS = (
    re.compile(r"\((\d+) in the messages", re.IGNORECASE),
    re.compile(r"\bn_prompt_tokens\b\W{0,4}(\d+)", re.IGNORECASE),
)
# A chat template that refuses the request layout (Mistral, Gemma, strict ChatML copies).
_TEMPLATE_HINTS = (
    "system message must be at the beginning",
    "system message must be first",
    "system role not supported",
    "roles must alternate",
    "only the first message can be a system",
    "system messages are only",
)
_TOOLS_HINTS = (
    "does not support tools",
    "tools are not supported",
    "tool use is not supported",
    "tool calls are not supported",
    "enable-auto-tool-choice",
    "function calling is not",
)
_MISSING_HINTS = ("not found, try pulling", "does not exist", "model_not_found", "no such model")
# Errors that say something about the request, not the server's state: never retried.
_PERMANENT_HINTS = (
    "validation error",
    "template",
    "jinja",
    "has no attribute",
    "response_format",
    *_TEMPLATE_HINTS,
    *_TOOLS_HINTS,
)


class LLM(Protocol):
    """Anything that can complete a chat request."""

    model: str

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> Completion: ...


@runtime_checkable
class StreamingLLM(Protocol):
    """An `LLM` that can also stream its answer (`OpenAILLM`); others answer whole."""

    async def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_text: TextSink,
        model: str | None = None,
        max_tokens: int | None = None,
    ) -> Completion: ...


def _has(text: str, hints: tuple[str, ...]) -> bool:
    lowered = text.lower()
    return any(hint in lowered for hint in hints)


def is_overflow_message(text: str) -> bool:
    return _has(text, _OVERFLOW_HINTS)


def stated_limit(text: str) -> int | None:
    """The context window an overflow error states, if it states one."""
    for pattern in _LIMIT_PATTERNS:
        match = pattern.search(text)
        if match and 128 <= int(match.group(1)) <= 10_000_000:
            return int(match.group(1))
    return None


def stated_prompt(text: str) -> int | None:
    """The prompt's tokens an overflow error states, if it states them."""
    for pattern in _PROMPT_PATTERNS:
        match = pattern.search(text)
        if match:
            return int(match.group(1))
    return None


def is_permanent(status: int, text: str) -> bool:
    """True when a retry cannot change the answer (a 4xx, or a 5xx that names the request)."""
    if status in (408, 409, 429):
        return False
    return status < 500 or _has(text, _PERMANENT_HINTS)


class OpenAILLM:
    """`LLM` over the OpenAI chat-completions HTTP API, with httpx.

    Connection errors, timeouts, 408, 409, 429 and 5xx are retried `[llm] max_retries`
    times with exponential backoff (a server's `Retry-After` is honoured, up to 30 s);
    other answers are final. One client per event loop: a loop's connections never
    leak into another.
    """

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.model = config.model
        self.base_url = config.base_url.rstrip("/")
        self._client: httpx.AsyncClient | None = None
        self.unstreamed: set[str] = set()  # models whose server would not stream
        self.no_usage_option: set[str] = set()  # ... nor take `stream_options`
        self._loop: asyncio.AbstractEventLoop | None = None
        self.answered = 0  # completions received since start (`mnemo chat`'s exit status)
        self.failed = 0  # requests that ended in an LLMError

    def client(self) -> httpx.AsyncClient:
        import httpx  # here, not at module level: `mnemo --help` need not pay for it

        from core.model.tls import shared_tls_context

        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            headers = {"Authorization": f"Bearer {self.config.api_key or 'no-key'}"}
            self._client = httpx.AsyncClient(
                headers=headers, timeout=self.config.timeout_s, verify=shared_tls_context()
            )
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = None

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> Completion:
        params = self._params(messages, tools, model, max_tokens)
        if response_format is not None:
            params["response_format"] = response_format
        started = time.monotonic()
        try:
            body = await self._post_json("/chat/completions", params)
            completion = _to_completion(body, int((time.monotonic() - started) * 1000))
        except LLMError:
            self.failed += 1
            raise
        self.answered += 1
        return completion

    async def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_text: TextSink,
        model: str | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """`complete()` read as the server streams it, `on_text` called with the visible
        text each time it grows. A server that refuses to stream (an error on `stream`, or
        a whole JSON answer) is answered whole, and for that model never asked to stream
        again; a stream that breaks after some text ends `INTERRUPTED` with that text."""
        name = model or self.model
        params = self._params(messages, tools, model, max_tokens)
        params["stream"] = True
        if name not in self.no_usage_option:
            params["stream_options"] = {"include_usage": True}
        attempt = 0
        while name not in self.unstreamed:
            try:
                streamed = await self._read_stream(params, on_text)
            except StreamRefused as refused:
                if refused.busy is not None:  # retried as `complete` retries it, then raised
                    attempt = await self._retry_or_raise(refused.busy, attempt)
                    continue
                whole = refused.completion is not None
                if refused.remember and not whole and params.pop("stream_options", None):
                    self.no_usage_option.add(name)  # some servers refuse only that option
                    continue
                if refused.remember:
                    logger.warning("the model server does not stream %s (%s); answering"
                                   " whole from now on", name, refused)  # fmt: skip
                    self.unstreamed.add(name)
                if refused.completion is not None:
                    self.answered += 1
                    return await _shown(refused.completion, on_text)
                break
            except LLMError:
                self.failed += 1
                raise
            self.answered += 1
            return streamed
        completion = await self.complete(messages, tools, model=model, max_tokens=max_tokens)
        return await _shown(completion, on_text)

    async def _retry_or_raise(self, error: LLMError, attempt: int) -> int:
        """The next attempt's number after a busy server's answer, or `error` when spent."""
        if attempt >= self.config.max_retries:
            self.failed += 1
            raise error
        await asyncio.sleep(backoff_s(attempt))
        return attempt + 1

    async def _read_stream(self, params: dict[str, Any], on_text: TextSink) -> Completion:
        """One streamed request; `StreamRefused` when it should be asked whole instead."""
        import httpx

        started = time.monotonic()
        assembler = StreamAssembler()
        url = f"{self.base_url}/chat/completions"
        try:
            async with self.client().stream(
                "POST", url, json=params, timeout=self.config.timeout_s
            ) as response:
                await _check_streaming(response, started)
                async for line in response.aiter_lines():
                    data = sse_data(line)
                    if data == "[DONE]":
                        break
                    if data and assembler.feed(_chunk(data)):
                        await on_text(assembler.visible)
        except httpx.HTTPError as exc:
            if assembler.visible:
                logger.warning("the model's stream broke after %d characters: %s",
                               len(assembler.visible), exc)  # fmt: skip
                return assembler.completion(_ms_since(started), interrupted=True)
            raise StreamRefused(f"stream failed before any text: {exc}", remember=False) from exc
        if not assembler.finish_reason and assembler.visible and not assembler.calls:
            return assembler.completion(_ms_since(started), interrupted=True)
        return assembler.completion(_ms_since(started))

    def _params(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        model: str | None,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": model or self.model,
            "messages": messages,
            "max_tokens": max_tokens or self.config.max_output_tokens,
        }
        if tools:
            # Without tool_choice some servers (llama-cpp-python's chatml-function-calling)
            # leave the tools out of the prompt.
            params["tools"] = tools
            params["tool_choice"] = "auto"
        if self.config.temperature is not None:
            params["temperature"] = self.config.temperature
        return params

    async def ping(self) -> str:
        """List the server's models; raise an `LLMError` if it cannot be reached."""
        import httpx

        try:
            response = await self.client().get(f"{self.base_url}/models", timeout=5)
        except httpx.HTTPError as exc:
            raise LLMUnavailable(f"cannot reach the model server at {self.base_url}") from exc
        if response.status_code != 200:
            raise LLMUnavailable(f"{response.status_code}: {error_detail(response)}")
        try:
            names = [str(item["id"]) for item in response.json()["data"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise LLMUnavailable("the model list is not OpenAI-shaped JSON") from exc
        return ", ".join(names[:5]) + (" …" if len(names) > 5 else "")

    async def _post_json(self, path: str, params: dict[str, Any]) -> Any:
        """POST `params`; the decoded JSON answer of a 200, after retrying what may pass."""
        import httpx

        attempts = self.config.max_retries + 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = await self.client().post(
                    f"{self.base_url}{path}", json=params, timeout=self.config.timeout_s
                )
            except httpx.TimeoutException as exc:
                if last:
                    raise LLMTimeout(
                        f"the model did not answer within {self.config.timeout_s:g}s"
                    ) from exc
                await asyncio.sleep(backoff_s(attempt))
                continue
            except httpx.HTTPError as exc:
                if last:
                    raise LLMUnavailable(
                        f"cannot reach the model server at {self.base_url}"
                    ) from exc
                await asyncio.sleep(backoff_s(attempt))
                continue
            if response.status_code == 200:
                return _json_body(response)
            if last or response.status_code not in RETRIED_STATUSES:
                raise status_error(response)
            if is_permanent(response.status_code, error_detail(response)):
                raise status_error(response)
            await asyncio.sleep(backoff_s(attempt, response.headers.get("retry-after")))
        raise AssertionError("unreachable")


RETRIED_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 30.0


def backoff_s(attempt: int, retry_after: str | None = None) -> float:
    """How long to wait before retry `attempt + 1`: the server's word, else 0.5 s doubling."""
    if retry_after:
        try:
            return min(MAX_RETRY_AFTER_S, max(0.0, float(retry_after)))
        except ValueError:
            pass
    return min(8.0, 0.5 * float(2**attempt)) * (0.75 + random.random() / 2)


def error_detail(response: httpx.Response) -> str:
    """The server's error message from an error answer (OpenAI's shape, or the raw text)."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    inner = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(inner, dict) and inner.get("message"):
        return str(inner["message"])[:500]
    if isinstance(inner, str):
        return inner[:500]
    return response.text[:500]


def status_error(response: httpx.Response) -> LLMError:
    """The error an answer other than 200 stands for."""
    return classify_error(response.status_code, error_detail(response), response.text)


def classify_error(status: int, detail: str, body: str = "") -> LLMError:
    """An error answer as the `LLMError` that says what to do about it."""
    said = f"model server answered {status}: {detail}"
    if status in (400, 413, 422, 500) and is_overflow_message(detail):
        said_all = f"{detail} {body}"
        return ContextOverflow(detail, stated_limit(said_all), stated_prompt(said_all))
    if _has(detail, _TEMPLATE_HINTS):
        return TemplateRejected(said)
    if _has(detail, _TOOLS_HINTS):
        return ToolsUnsupported(said)
    if status in (400, 404) and _has(detail, _MISSING_HINTS) and "model" in detail.lower():
        return ModelMissing(said)
    if "response_format" in detail.lower() or "json_schema" in detail.lower():
        return FormatUnsupported(said)
    if is_permanent(status, detail):
        return LLMRejected(said)
    return LLMUnavailable(said)


def _json_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        kind = response.headers.get("content-type", "no content type")
        raise AnswerNotJSON(
            f"the model server answered something that is not JSON ({kind}: {response.text[:80]!r})"
        ) from exc


def _to_completion(body: Any, latency_ms: int) -> Completion:
    """A chat completion from its JSON; `LLMBadResponse` for any other shape (never a
    crash on a field of the wrong type)."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise LLMBadResponse("the model server returned no choices")
    choice = choices[0]
    message = choice.get("message") or {}
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(message, dict) or not isinstance(content, str | None):
        raise LLMBadResponse(f"the model server's message is not a chat message: {message!r:.80}")
    calls = [
        ToolCall(
            str(call.get("id") or f"call_{index}"),
            str(call["function"].get("name") or ""),
            _arguments(call["function"].get("arguments")),
        )
        for index, call in enumerate(_list(message.get("tool_calls")))
        if isinstance(call, dict) and isinstance(call.get("function"), dict)
    ]
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    return Completion(
        content=content or "",
        tool_calls=calls,
        model=str(body.get("model") or ""),
        prompt_tokens=_count(usage.get("prompt_tokens")),
        completion_tokens=_count(usage.get("completion_tokens")),
        latency_ms=latency_ms,
        finish_reason=str(choice.get("finish_reason") or ""),
    )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _arguments(value: Any) -> str:
    """Tool-call arguments as the JSON text OpenAI sends (some servers send the object)."""
    if isinstance(value, str):
        return value or "{}"
    return json.dumps(value) if isinstance(value, dict) else "{}"


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class StreamRefused(LLMError):  # noqa: N818 - an internal signal, never leaves this module
    """A streamed request the server would not (or could not) stream: ask it whole."""

    def __init__(
        self,
        why: str,
        *,
        remember: bool,
        completion: Completion | None = None,
        busy: LLMError | None = None,
    ):
        super().__init__(why)
        self.remember = remember
        self.completion = completion
        self.busy = busy  # a busy server's error: retried like `complete`, not asked whole


async def _check_streaming(response: httpx.Response, started: float) -> None:
    """Raise what a streamed request's answer head says: an `LLMError` the turn learns
    from, or `StreamRefused` (a refusal of `stream`, a whole JSON answer, a busy server)."""
    if response.status_code != 200:
        await response.aread()
        error = status_error(response)
        if type(error) is LLMRejected or response.status_code == 501:
            raise StreamRefused(str(error), remember=True)
        if response.status_code in RETRIED_STATUSES and not isinstance(error, ContextOverflow):
            raise StreamRefused(str(error), remember=False, busy=error)
        raise error
    if "text/event-stream" not in response.headers.get("content-type", ""):
        await response.aread()
        whole = _to_completion(_json_body(response), _ms_since(started))
        raise StreamRefused("answered whole JSON", remember=True, completion=whole)


async def _shown(completion: Completion, on_text: TextSink) -> Completion:
    """`completion`, its text shown at once (a reply that was not streamed)."""
    visible = strip_think(completion.content)
    if visible:
        await on_text(visible)
    return completion


def _chunk(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        logger.debug("skipping a stream chunk that is not JSON: %.80s", data)
        return None


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
