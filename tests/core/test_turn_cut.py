"""Replies cut at the output limit (`finish_reason` "length"): continued once, else marked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.config import Config
from core.turn.agent import CONTINUE_REQUEST, CUT_MARKER, join_parts
from tests.core.support import light_runtime, stored


@pytest.fixture
def runtime(config: Config) -> Iterator[Runtime]:
    rt = light_runtime(config)
    yield rt
    rt.close()


async def test_a_cut_reply_is_continued_once_and_joined(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(FakeReply("Why is there a cat", finish_reason="length"), FakeReply("in the hat?"))
    reply = await runtime.agent.handle(Inbound("terminal", "t", "Tell me a joke."))
    assert reply is not None and reply.text == "Why is there a cat in the hat?"
    continuation = fake_llm.requests[1]
    assert "tools" not in continuation
    assert continuation["messages"][-2:] == [
        {"role": "assistant", "content": "Why is there a cat"},
        CONTINUE_REQUEST,
    ]
    assert stored(runtime, "t") == [
        ("user", "Tell me a joke."),
        ("assistant", "Why is there a cat in the hat?"),
    ]


async def test_a_reply_still_cut_after_continuing_says_so(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(
        FakeReply("Chapter one: it was", finish_reason="length"),
        FakeReply("a dark and stormy", finish_reason="length"),
        FakeReply("Next turn."),
    )
    reply = await runtime.agent.handle(Inbound("terminal", "t", "Write a novel."))
    expected = f"Chapter one: it was a dark and stormy\n\n{CUT_MARKER}"
    assert reply is not None and reply.text == expected
    assert stored(runtime, "t")[-1] == ("assistant", expected)
    assert len(fake_llm.requests) == 2  # continued once, not more
    await runtime.agent.handle(Inbound("terminal", "t", "go on"))
    users = [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "user"]
    assert users == ["Write a novel.", "go on"]  # the continue request is never stored


async def test_a_failed_continuation_keeps_the_part_and_marks_it(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(
        FakeReply("The first half", finish_reason="length"),
        FakeReply(status=503, error="busy"),
    )
    reply = await runtime.agent.handle(Inbound("terminal", "t", "Explain."))
    assert reply is not None and not reply.is_error
    assert reply.text == f"The first half\n\n{CUT_MARKER}"


def test_join_parts_puts_a_space_only_between_words() -> None:
    assert join_parts("a cat", "in a hat") == "a cat in a hat"
    assert join_parts("a cat ", "in a hat") == "a cat in a hat"
    assert join_parts("a cat", ", then") == "a cat, then"
    assert join_parts("", "rest") == "rest" and join_parts("part", "") == "part"
