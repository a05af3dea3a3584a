"""The model client reads real servers' error answers: what each means, what is retried."""

from __future__ import annotations

import pytest

from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, OllamaTraits, ServerTraits
from core.config import LLMConfig
from core.errors import (
    ContextOverflow,
    FormatUnsupported,
    LLMRejected,
    LLMUnavailable,
    ModelMissing,
    TemplateRejected,
    ToolsUnsupported,
)
from core.model.client import OpenAILLM, classify_error, stated_limit

LLAMA_CPP_PYTHON = (
    "This model's maximum context length is 2048 tokens. However, you requested 2371 tokens "
    "(1859 in the messages, 512 in the completion). Please reduce the length of the messages "
    "or completion."
)


def test_overflow_errors_state_their_limit() -> None:
    error = classify_error(400, LLAMA_CPP_PYTHON)
    assert isinstance(error, ContextOverflow) and error.limit == 2048
    body = (
        '{"error":{"code":400,"type":"exceed_context_size_error",'
        '"n_prompt_tokens":5000,"n_ctx":4096}}'
    )
    llama_server = classify_error(400, "the request exceeds the available context size", body)
    assert isinstance(llama_server, ContextOverflow) and llama_server.limit == 4096
    assert stated_limit("prompt is too long") is None


@pytest.mark.parametrize(
    ("status", "text", "kind"),
    [
        (500, "System message must be at the beginning.", TemplateRejected),
        (
            500,
            "Conversation roles must alternate user/assistant/user/assistant/...",
            TemplateRejected,
        ),
        (400, "registry.ollama.ai/library/gemma:2b does not support tools", ToolsUnsupported),
        (404, 'model "llama3.2" not found, try pulling it first', ModelMissing),
        (
            404,
            "The model `gpt-5-nano` does not exist or you do not have access to it.",
            ModelMissing,
        ),
        (500, "1 validation error: response_format type json_schema", FormatUnsupported),
        (401, "Incorrect API key provided", LLMRejected),
        (500, "'dict object' has no attribute 'content'", LLMRejected),
        (503, "Service Unavailable", LLMUnavailable),
        (429, "rate limited", LLMUnavailable),
    ],
)
def test_error_texts_are_classified(status: int, text: str, kind: type[Exception]) -> None:
    error = classify_error(status, text)
    assert type(error) is kind, (status, text, error)


async def test_a_permanent_500_is_not_retried_a_transient_one_is() -> None:
    config = LLMConfig(max_retries=2, timeout_s=5)
    with FakeOpenAIServer(traits=ServerTraits(strict_system=True)) as server:
        config.base_url = server.base_url
        llm = OpenAILLM(config)
        late = [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]
        with pytest.raises(TemplateRejected):
            await llm.complete(late)
        assert len(server.requests) == 1
        server.add(FakeReply(status=503, error="busy"), FakeReply("fine"))
        answer = await llm.complete([{"role": "user", "content": "hi"}])
        assert answer.content == "fine" and len(server.requests) == 3
        await llm.aclose()


async def test_tools_are_sent_with_tool_choice_auto_and_formats_pass_through() -> None:
    with FakeOpenAIServer() as server:
        llm = OpenAILLM(LLMConfig(base_url=server.base_url, max_retries=0))
        tool = {"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}
        await llm.complete([{"role": "user", "content": "hi"}], [tool], max_tokens=7)
        await llm.complete(
            [{"role": "user", "content": "hi"}], response_format={"type": "json_object"}
        )
        first, second = server.requests
        assert first["tool_choice"] == "auto" and first["max_tokens"] == 7
        assert second["response_format"] == {"type": "json_object"} and "tools" not in second
        await llm.aclose()


async def test_a_model_ollama_does_not_have_is_model_missing() -> None:
    traits = ServerTraits(served=("qwen2.5",), ollama=OllamaTraits())
    with FakeOpenAIServer(traits=traits) as server:
        llm = OpenAILLM(LLMConfig(base_url=server.base_url, model="llama3.2", max_retries=2))
        with pytest.raises(ModelMissing):
            await llm.complete([{"role": "user", "content": "hi"}])
        assert len(server.requests) == 1
        await llm.aclose()
