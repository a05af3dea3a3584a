"""The model client: one async `complete()` against any OpenAI-compatible server."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.config import LLMConfig
from core.errors import ContextOverflow, LLMBadResponse, LLMTimeout, LLMUnavailable

logger = logging.getLogger(__name__)

_OVERFLOW_HINTS = (
    "context_length_exceeded",
    "context length",
    "maximum context",
    "context window",
    "too many tokens",
    "prompt is too long",
)


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class Completion:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    model: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: int = 0
    finish_reason: str = ""


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
    ) -> Completion: ...


def is_overflow_message(text: str) -> bool:
    lowered = text.lower()
    return any(hint in lowered for hint in _OVERFLOW_HINTS)


class OpenAILLM:
    """`LLM` over the `openai` package's `AsyncOpenAI` (retries and backoff are the client's)."""

    def __init__(self, config: LLMConfig) -> None:
        import openai  # here, not at module level: importing it takes a second

        self.config = config
        self.model = config.model
        self.client = openai.AsyncOpenAI(
            base_url=config.base_url,
            api_key=config.api_key or "no-key",
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        params: dict[str, Any] = {
            "model": model or self.model,
            "messages": messages,
            "max_tokens": max_tokens or self.config.max_output_tokens,
        }
        if tools:
            params["tools"] = tools
        if self.config.temperature is not None:
            params["temperature"] = self.config.temperature
        import openai

        started = time.monotonic()
        try:
            response = await self.client.chat.completions.create(**params)
        except openai.APITimeoutError as exc:
            raise LLMTimeout(f"the model did not answer within {self.config.timeout_s:g}s") from exc
        except openai.APIConnectionError as exc:
            raise LLMUnavailable(
                f"cannot reach the model server at {self.config.base_url}"
            ) from exc
        except openai.APIStatusError as exc:
            detail = _error_detail(exc)
            if exc.status_code in (400, 413) and is_overflow_message(detail):
                raise ContextOverflow(detail) from exc
            raise LLMUnavailable(f"model server answered {exc.status_code}: {detail}") from exc
        except openai.APIError as exc:
            raise LLMBadResponse(f"unusable answer from the model server: {exc}") from exc
        return _to_completion(response, int((time.monotonic() - started) * 1000))

    async def ping(self) -> str:
        """List the server's models; raise an `LLMError` if it cannot be reached."""
        import openai

        try:
            page = await self.client.with_options(max_retries=0, timeout=5).models.list()
        except openai.APIStatusError as exc:
            raise LLMUnavailable(f"{exc.status_code}: {_error_detail(exc)}") from exc
        except openai.APIError as exc:
            raise LLMUnavailable(str(exc)) from exc
        names = [item.id for item in page.data]
        return ", ".join(names[:5]) + (" …" if len(names) > 5 else "")


def _error_detail(exc: Any) -> str:
    """The server's error message from an `openai.APIStatusError`."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:500]
        if isinstance(inner, str):
            return inner[:500]
    return str(exc.message)[:500]


def _to_completion(response: Any, latency_ms: int) -> Completion:
    choices = getattr(response, "choices", None)
    if not choices:
        raise LLMBadResponse("the model server returned no choices")
    choice = choices[0]
    message = choice.message
    calls = [
        ToolCall(call.id, call.function.name, call.function.arguments or "{}")
        for call in (message.tool_calls or [])
        if getattr(call, "function", None) is not None
    ]
    usage = getattr(response, "usage", None)
    return Completion(
        content=message.content or "",
        tool_calls=calls,
        model=getattr(response, "model", "") or "",
        prompt_tokens=getattr(usage, "prompt_tokens", None) if usage else None,
        completion_tokens=getattr(usage, "completion_tokens", None) if usage else None,
        latency_ms=latency_ms,
        finish_reason=choice.finish_reason or "",
    )
