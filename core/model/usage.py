"""One model call with its usage recorded: tokens and latency on success, a failed row if not."""

from __future__ import annotations

from typing import Any

from core.errors import LLMError
from core.model.client import LLM, Completion, StreamingLLM
from core.model.stream import TextSink
from core.storage.store import SessionStore


async def complete_recorded(
    llm: LLM,
    store: SessionStore,
    chat_id: int | None,
    kind: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    *,
    model: str | None = None,
    max_tokens: int | None = None,
    response_format: dict[str, Any] | None = None,
    on_text: TextSink | None = None,
) -> Completion:
    """`llm.complete()`, recording the call in `llm_usage` as `kind` (turn, compaction, …).
    With `on_text` (and a model client that streams) the answer is streamed, its visible
    text handed to `on_text` as it grows."""
    try:
        if on_text is not None and response_format is None and isinstance(llm, StreamingLLM):
            completion = await llm.stream(
                messages, tools, on_text=on_text, model=model, max_tokens=max_tokens
            )
        else:
            completion = await llm.complete(
                messages, tools, model=model, max_tokens=max_tokens, response_format=response_format
            )
    except LLMError:
        store.record_usage(chat_id, kind, model or llm.model, None, None, 0, ok=False)
        raise
    store.record_usage(
        chat_id,
        kind,
        completion.model or model or llm.model,
        completion.prompt_tokens,
        completion.completion_tokens,
        completion.latency_ms,
    )
    return completion
