"""A streamed turn: the channel sees the reply grow, the final text is the one stored
(once) and delivered, a cut stream says it was cut, tool calls mid-stream still run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.config import Config
from core.turn.agent import STREAM_CUT_MARKER
from tests.core.support import dispatching_runtime, stored
from tests.fakes.channels import StreamingRecordingChannel


def said(text: str) -> Inbound:
    return Inbound("terminal", "s", text, message_id="1")


@pytest.fixture
async def rt(config: Config) -> AsyncIterator[Runtime]:
    async with dispatching_runtime(config) as runtime:
        yield runtime


def replies(runtime: Runtime) -> list[str]:
    """The assistant texts stored (a message carrying tool calls has none)."""
    return [text for role, text in stored(runtime, "s") if role == "assistant" and text]


async def test_the_reply_grows_on_the_channel_and_the_final_text_is_stored_once(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    channel = StreamingRecordingChannel()
    rt.dispatcher.attach(channel)
    fake_llm.add(FakeReply("Tea is a drink made from leaves."))
    assert await rt.dispatcher(said("what is tea?")) is None
    assert channel.shown()[0] == "Tea" and channel.shown()[-1] == "Tea is a drink made from leaves."
    assert channel.texts() == ["Tea is a drink made from leaves."]
    assert replies(rt) == channel.texts()
    assert {m.reply_to for _, m in channel.partials} == {"1"}
    totals = rt.deliveries.delivery_totals()
    assert (totals.replies, totals.delivered) == (1, 1)


async def test_a_cut_stream_keeps_what_was_shown_and_says_it_was_cut(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    channel = StreamingRecordingChannel()
    rt.dispatcher.attach(channel)
    fake_llm.add(FakeReply("one two three four five six", cut_after=3))
    await rt.dispatcher(said("count"))
    assert channel.shown()[-1] == "one two three"
    assert channel.texts() == [f"one two three {STREAM_CUT_MARKER}"]
    assert replies(rt) == channel.texts()


async def test_a_tool_call_mid_stream_runs_and_the_answer_after_it_is_shown(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    channel = StreamingRecordingChannel()
    rt.dispatcher.attach(channel)
    fake_llm.add(
        FakeReply("Let me look.", tool_calls=[tool_call("no_such_tool", {"q": "x"}, "c1")]),
        FakeReply("Found it."),
    )
    await rt.dispatcher(said("look it up"))
    assert fake_llm.requests[1]["messages"][-1]["role"] == "tool"
    assert channel.shown()[-1] == "Found it."
    assert channel.texts() == ["Found it."] == replies(rt)


async def test_think_blocks_are_neither_shown_nor_stored(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    channel = StreamingRecordingChannel()
    rt.dispatcher.attach(channel)
    fake_llm.add(FakeReply(pieces=["<thi", "nk>plan</th", "ink>", "Hello", " there"]))
    await rt.dispatcher(said("hi"))
    assert all("plan" not in text and "<" not in text for text in channel.shown())
    assert channel.texts() == ["Hello there"] == replies(rt)


async def test_streaming_off_sends_whole_replies_without_asking_the_server_to_stream(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    channel = StreamingRecordingChannel(streaming=False)
    rt.dispatcher.attach(channel)
    await rt.dispatcher(said("hello"))
    assert channel.partials == [] and channel.texts() == ["echo: hello"]
    assert "stream" not in fake_llm.requests[0]


async def test_a_final_send_that_fails_leaves_the_reply_undelivered_until_it_goes_out(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    channel = StreamingRecordingChannel()
    rt.dispatcher.attach(channel)
    channel.fail_next(2)  # the first attempt and its one retry
    await rt.dispatcher(said("hello"))
    assert channel.shown()[-1] == "echo: hello" and channel.texts() == []
    totals = rt.deliveries.delivery_totals()
    assert (totals.replies, totals.delivered) == (1, 0)
    rt.dispatcher.resume()
    async with asyncio.timeout(10):
        while not channel.sent:  # noqa: ASYNC110 (the chat's worker delivers it)
            await asyncio.sleep(0.01)
    assert channel.texts() == ["echo: hello"] == replies(rt)
