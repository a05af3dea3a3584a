"""The tool loop against the fake server: repeated calls, calls written as text, empty
answers, and the assistant messages that carry calls."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.config import Config
from core.turn.agent import NO_ANSWER
from tests.core.support import light_runtime, stored


@pytest.fixture
def runtime(config: Config) -> Iterator[Runtime]:
    rt = light_runtime(config)
    yield rt
    rt.close()


async def ask(runtime: Runtime, text: str) -> str:
    reply = await runtime.agent.handle(Inbound("terminal", "t", text))
    assert reply is not None and not reply.is_error
    return reply.text


def clock_call(call_id: str, **arguments: str) -> FakeReply:
    return FakeReply(tool_calls=[tool_call("get_current_time", arguments, call_id)])


async def test_a_repeated_call_is_not_run_again_and_the_model_answers_without_tools(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    first = clock_call("c1", zone="UTC", style="iso")
    repeat = tool_call("get_current_time", {}, "c2")
    repeat["function"]["arguments"] = '{ "style": "iso", "zone": "UTC" }'  # same call
    fake_llm.add(first, FakeReply(tool_calls=[repeat]), FakeReply("It is noon."))
    assert await ask(runtime, "what time is it?") == "It is noon."
    assert len(fake_llm.requests) == 3
    assert "tools" in fake_llm.requests[1] and "tools" not in fake_llm.requests[2]
    results = [m for m in fake_llm.requests[2]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["c1"]
    assert [role for role, _ in stored(runtime, "t")] == ["user", "assistant", "tool", "assistant"]


async def test_new_calls_beside_a_repeated_one_still_run(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    mixed = [tool_call("get_current_time", {}, "c2"), tool_call("get_current_time", {}, "c3")]
    mixed[1]["function"]["arguments"] = json.dumps({"zone": "CET"})
    fake_llm.add(clock_call("c1"), FakeReply(tool_calls=mixed), FakeReply("Two clocks read."))
    assert await ask(runtime, "time here and in Paris?") == "Two clocks read."
    final = fake_llm.requests[-1]
    assert "tools" not in final
    calls = [c["id"] for m in final["messages"] for c in m.get("tool_calls") or []]
    assert calls == ["c1", "c3"]  # c2 repeated c1: neither run nor sent back


async def test_assistant_messages_with_calls_carry_empty_content_never_null(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(clock_call("c1"), FakeReply("Done."), FakeReply("Still here."))
    await ask(runtime, "time?")
    await ask(runtime, "and now?")
    for request in fake_llm.requests[1:]:
        calling = [m for m in request["messages"] if m.get("tool_calls")]
        assert calling and all(m["content"] == "" for m in calling)


@pytest.mark.parametrize(
    "written",
    [
        'functions.structured_memory_delete:\n{"id": 3}',
        '<tool_call>{"name": "get_current_time", "arguments": {}}</tool_call>',
        '{"name": "get_current_time", "arguments": {}}',
    ],
)
async def test_a_call_written_as_text_is_never_shown_and_the_model_is_asked_again(
    runtime: Runtime, fake_llm: FakeOpenAIServer, written: str
) -> None:
    fake_llm.add(FakeReply(written), FakeReply("It is noon."))
    assert await ask(runtime, "what time is it?") == "It is noon."
    assert "tools" in fake_llm.requests[0] and "tools" not in fake_llm.requests[1]
    assert stored(runtime, "t") == [("user", "what time is it?"), ("assistant", "It is noon.")]
    assert all(written not in m["content"] for m in fake_llm.requests[1]["messages"])


async def test_text_beside_a_written_call_is_kept_without_asking_again(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    written = 'Noted, deleting it.\nfunctions.structured_memory_delete: {"id": 3}'
    fake_llm.add(FakeReply(written))
    assert await ask(runtime, "forget #3") == "Noted, deleting it."
    assert len(fake_llm.requests) == 1
    assert stored(runtime, "t")[-1] == ("assistant", "Noted, deleting it.")


async def test_an_empty_answer_to_a_request_with_tools_is_asked_once_without(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(FakeReply(""), FakeReply("Hello!"))
    assert await ask(runtime, "Say hi back in one sentence.") == "Hello!"
    assert ["tools" in request for request in fake_llm.requests] == [True, False]
    fake_llm.add(FakeReply(""), FakeReply(""))
    assert await ask(runtime, "and again?") == NO_ANSWER
    assert len(fake_llm.requests) == 4  # one retry, not more
