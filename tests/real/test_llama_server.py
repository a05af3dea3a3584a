"""The real-server helper itself: readiness, the KV-cache log, the strict copy's refusal."""

from __future__ import annotations

import pytest

from core.bench.fakes.llama_server import MODEL_ALIAS, STRICT_SYSTEM_ERROR, LlamaServer
from core.errors import TemplateRejected
from core.model.client import OpenAILLM
from tests.real.conftest import real_config

pytestmark = pytest.mark.real

SYSTEM = {"role": "system", "content": "You are a terse assistant. " * 20}


async def test_the_log_shows_the_prefix_a_follow_up_request_reused(
    default_server: LlamaServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    llm = OpenAILLM(real_config(tmp_path_factory.mktemp("d"), default_server).llm)
    first = [SYSTEM, {"role": "user", "content": "Name a colour."}]
    mark = default_server.log_size()
    reply = await llm.complete(first, None, model=MODEL_ALIAS, max_tokens=8)
    follow = [*first, {"role": "assistant", "content": reply.content}]
    follow.append({"role": "user", "content": "And another one?"})
    again = await llm.complete(follow, None, model=MODEL_ALIAS, max_tokens=8)
    await llm.aclose()

    evals = default_server.prompt_evals(since=mark)
    assert len(evals) == 2
    assert evals[0].prompt == reply.prompt_tokens and evals[1].prompt == again.prompt_tokens
    # The second request re-evaluates only what follows the first prompt (and its reply).
    assert evals[1].cached >= reply.prompt_tokens - 1
    assert evals[1].evaluated < again.prompt_tokens - reply.prompt_tokens + 20


async def test_the_strict_copy_refuses_a_late_system_message(
    strict_server: LlamaServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    llm = OpenAILLM(real_config(tmp_path_factory.mktemp("s"), strict_server).llm)
    late = [
        {"role": "user", "content": "Hi."},
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Colour?"},
    ]
    try:
        with pytest.raises(TemplateRejected, match=STRICT_SYSTEM_ERROR):
            await llm.complete(late, None, model=MODEL_ALIAS, max_tokens=8)
        leading = [{"role": "system", "content": "Answer in one word."}, late[0]]
        assert (await llm.complete(leading, None, model=MODEL_ALIAS, max_tokens=8)).finish_reason
    finally:
        await llm.aclose()
