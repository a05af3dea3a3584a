"""A model server's 200 that is not a chat completion gets its own clear reply, never the
dispatcher's "something went wrong on my side"."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.config import Config
from core.turn.dispatcher import CRASH_REPLY
from tests.core.support import light_runtime


@pytest.fixture
def runtime(config: Config) -> Iterator[Runtime]:
    rt = light_runtime(config)
    yield rt
    rt.close()


async def ask(runtime: Runtime, text: str) -> str:
    reply = await runtime.dispatcher(Inbound("terminal", "shapes", text))
    assert reply is not None and reply.is_error
    return reply.text


async def test_a_body_that_is_not_json_is_named_as_such(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(FakeReply(raw_body="<html><body>Open WebUI</body></html>"))
    text = await ask(runtime, "hello")
    assert "answered something that is not JSON" in text and "base_url" in text
    assert text != CRASH_REPLY
    fake_llm.add(FakeReply("Fine again."))
    ok = await runtime.dispatcher(Inbound("terminal", "shapes", "and now?"))
    assert ok is not None and ok.text == "Fine again."


@pytest.mark.parametrize(
    "body",
    [
        '{"choices": [{"message": "just a string"}]}',
        '{"choices": [{"message": {"role": "assistant", "content": 42}}]}',
        '{"choices": []}',
        '"a JSON string"',
    ],
)
async def test_json_of_the_wrong_shape_is_a_clear_error_not_a_crash(
    runtime: Runtime, fake_llm: FakeOpenAIServer, body: str
) -> None:
    fake_llm.add(FakeReply(raw_body=body))
    text = await ask(runtime, "hello")
    assert "not a chat completion I can read" in text and text != CRASH_REPLY


async def test_odd_but_readable_fields_are_read(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    body = (
        '{"choices": [{"message": {"role": "assistant", "content": "Hi.",'
        ' "tool_calls": "none"}}], "usage": ["not", "a", "dict"]}'
    )
    fake_llm.add(FakeReply(raw_body=body))
    reply = await runtime.dispatcher(Inbound("terminal", "shapes", "hello"))
    assert reply is not None and reply.text == "Hi." and not reply.is_error
