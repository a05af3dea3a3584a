"""Skills on the real llama.cpp tier (issue 29): an installed skill's name and description
are in the request the server evaluates, and installing one between turns keeps the
previous request, static prefix first, in the server's KV cache (the list is in the
dynamic part, after the history)."""

from __future__ import annotations

import httpx
import pytest

from core.api import Inbound
from core.bench.fakes.llama_server import LlamaServer
from core.bench.kv import SKILL_DESCRIPTION, SKILL_NAME, install_skill
from tests.real.conftest import RuntimeFactory

pytestmark = pytest.mark.real

FIRST = "Hello! I am planning a few things this month and would like some help."
SECOND = "I want to plan a trip to Lisbon in May with two kids. What should I book first?"


def server_tokens(server: LlamaServer, text: str) -> int:
    """How many tokens the server's own tokenizer makes of `text`."""
    base = server.base_url.removesuffix("/v1")
    response = httpx.post(f"{base}/extras/tokenize/count", json={"input": text}, timeout=60)
    response.raise_for_status()
    return int(response.json()["count"])


async def test_a_skill_added_between_turns_is_in_the_request_and_the_prefix_stays_cached(
    default_server: LlamaServer, real_runtime: RuntimeFactory
) -> None:
    async with real_runtime(default_server, llm={"max_output_tokens": 24}) as runtime:
        before = await runtime.dispatcher(Inbound("terminal", "skills", FIRST))
        assert before is not None and not before.is_error
        chat = runtime.store.get_or_create_chat("terminal", "skills")
        prefix = runtime.planner.plan(chat, [], tools=False).messages[0]["content"]
        assert install_skill(runtime) == SKILL_NAME  # as `mnemo skills add` installs it
        again = runtime.planner.plan(chat, [], tools=False).messages[0]["content"]
        assert again == prefix  # byte-stable: the list is not in the static prefix
        mark = default_server.log_size()
        reply = await runtime.dispatcher(Inbound("terminal", "skills", SECOND))
        assert reply is not None and not reply.is_error
        sent = [m for m in runtime.store.history(chat.id) if m.role == "user"]

    # The block sent with the second message (kept on it as sent) lists the skill.
    block = sent[-1].context or ""
    assert f"- {SKILL_NAME}: {SKILL_DESCRIPTION}" in block, block
    assert SKILL_NAME not in (sent[0].context or "")
    assert SKILL_NAME not in prefix
    first = default_server.prompt_evals(since=mark)[0]
    # The server reused the previous request from its start, past the static prefix and
    # the first message (the template's markers make the real count larger still), and
    # evaluated what follows, the skills list among it.
    reused = server_tokens(default_server, prefix) + server_tokens(default_server, FIRST)
    assert first.cached >= reused, (first, reused)
    assert first.evaluated >= server_tokens(default_server, block), (first, block)
