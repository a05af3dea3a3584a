"""The model client reads a streamed answer: real SSE chunks from the fake server, with
content and tool-call deltas, reasoning never shown, a cut stream and servers that
will not stream."""

from __future__ import annotations

import asyncio
import json

import pytest

from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, ServerTraits, tool_call
from core.config import LLMConfig
from core.errors import ContextOverflow
from core.model.client import OpenAILLM
from core.model.stream import INTERRUPTED, ThinkFilter

ASK = [{"role": "user", "content": "hi"}]


def stream(server: FakeOpenAIServer) -> tuple[str, list[str], OpenAILLM]:
    """Stream one answer; (its content, every visible text shown, the client)."""
    llm = OpenAILLM(LLMConfig(base_url=server.base_url, model="fake-model", max_retries=0))
    shown: list[str] = []

    async def show(text: str) -> None:
        shown.append(text)

    async def run() -> str:
        try:
            return (await llm.stream(ASK, on_text=show)).content
        finally:
            await llm.aclose()

    return asyncio.run(run()), shown, llm


def test_content_deltas_grow_the_text_and_usage_comes_from_the_last_chunk() -> None:
    with FakeOpenAIServer() as server:
        server.add(FakeReply("one two three four", completion_tokens=4))
        llm = OpenAILLM(LLMConfig(base_url=server.base_url, model="fake-model"))
        seen: list[str] = []

        async def show(text: str) -> None:
            seen.append(text)

        completion = asyncio.run(llm.stream(ASK, on_text=show))
    assert seen == ["one", "one two", "one two three", "one two three four"]
    assert completion.content == "one two three four"
    assert completion.finish_reason == "stop" and completion.completion_tokens == 4
    assert completion.prompt_tokens is not None and completion.prompt_tokens > 0
    assert server.requests[0]["stream"] is True
    assert server.requests[0]["stream_options"] == {"include_usage": True}


def test_tool_call_deltas_are_joined_by_index() -> None:
    calls = [tool_call("remember", {"fact": "likes tea"}, "c1"), tool_call("now", {}, "c2")]
    with FakeOpenAIServer() as server:
        server.add(FakeReply(tool_calls=calls))
        llm = OpenAILLM(LLMConfig(base_url=server.base_url, model="fake-model"))

        async def show(text: str) -> None:
            raise AssertionError(f"nothing is to be shown, got {text!r}")

        completion = asyncio.run(llm.stream(ASK, [{"type": "function"}], on_text=show))
    assert [(c.id, c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [
        ("c1", "remember", {"fact": "likes tea"}),
        ("c2", "now", {}),
    ]
    assert completion.finish_reason == "tool_calls"


def test_reasoning_and_a_think_block_split_across_chunks_never_show() -> None:
    pieces = ["Hel", "lo <th", "ink>secret pl", "an</thi", "nk> world"]
    with FakeOpenAIServer() as server:
        server.add(FakeReply(reasoning="hidden reasoning", pieces=pieces))
        content, shown, _ = stream(server)
    assert shown[-1] == "Hello  world"
    assert all("secret" not in text and "<" not in text and "hidden" not in text for text in shown)
    assert "<think>secret plan</think>" in content  # the raw answer, for the turn to clean


def test_a_stream_cut_half_way_keeps_what_was_shown() -> None:
    with FakeOpenAIServer() as server:
        server.add(FakeReply("a b c d e f g h", cut_after=4))
        content, shown, _ = stream(server)
    assert content == "a b c d" == shown[-1]


def test_a_cut_stream_ends_interrupted() -> None:
    with FakeOpenAIServer() as server:
        server.add(FakeReply("a b c d e f g h", cut_after=3))
        llm = OpenAILLM(LLMConfig(base_url=server.base_url, model="fake-model"))

        async def show(text: str) -> None:
            pass

        completion = asyncio.run(llm.stream(ASK, on_text=show))
    assert completion.finish_reason == INTERRUPTED and completion.content == "a b c"


@pytest.mark.parametrize("mode", ["refuse", "json"])
def test_a_server_that_will_not_stream_answers_whole_and_is_not_asked_again(mode: str) -> None:
    with FakeOpenAIServer(traits=ServerTraits(stream=mode)) as server:
        server.add(FakeReply("whole answer"), FakeReply("second"))
        llm = OpenAILLM(LLMConfig(base_url=server.base_url, model="fake-model", max_retries=0))
        shown: list[str] = []

        async def show(text: str) -> None:
            shown.append(text)

        async def twice() -> list[str]:
            first = await llm.stream(ASK, on_text=show)
            second = await llm.stream(ASK, on_text=show)
            return [first.content, second.content]

        assert asyncio.run(twice()) == ["whole answer", "second"]
    assert shown == ["whole answer", "second"]
    assert llm.unstreamed == {"fake-model"}
    asked = [bool(request.get("stream")) for request in server.requests]
    # A refusal is first taken as one of `stream_options`; asked again without it, then whole.
    assert asked == ([True, True, False, False] if mode == "refuse" else [True, False])


def test_a_server_that_refuses_only_stream_options_streams_without_usage() -> None:
    with FakeOpenAIServer(traits=ServerTraits(no_stream_options=True)) as server:
        server.add(FakeReply("a b"), FakeReply("c d"))
        content, shown, llm = stream(server)
        assert content == "a b" and shown == ["a", "a b"]
        assert stream_again(llm) == "c d"
    assert llm.no_usage_option == {"fake-model"} and llm.unstreamed == set()
    assert ["stream_options" in request for request in server.requests] == [True, False, False]


def stream_again(llm: OpenAILLM) -> str:
    async def show(text: str) -> None:
        pass

    async def run() -> str:
        try:
            return (await llm.stream(ASK, on_text=show)).content
        finally:
            await llm.aclose()

    return asyncio.run(run())


def test_an_overflow_on_a_streamed_request_is_raised_for_the_turn_to_learn() -> None:
    with FakeOpenAIServer(traits=ServerTraits(n_ctx=10)) as server:
        llm = OpenAILLM(LLMConfig(base_url=server.base_url, model="fake-model", max_retries=0))

        async def show(text: str) -> None:
            pass

        with pytest.raises(ContextOverflow):
            asyncio.run(llm.stream([{"role": "user", "content": "x" * 400}], on_text=show))
    assert llm.unstreamed == set()


@pytest.mark.parametrize(
    ("pieces", "shown"),
    [
        (["<think>a</think>b"], "b"),
        (["x<", "thinking>y</thinking>z"], "xz"),
        (["a <", "b"], "a <b"),
        (["<reasoning>never closed"], ""),
        (["ends with <thi"], "ends with <thi"),
    ],
)
def test_the_think_filter_holds_back_only_what_may_be_a_tag(pieces: list[str], shown: str) -> None:
    think = ThinkFilter()
    text = "".join(think.feed(piece) for piece in pieces) + think.flush()
    assert text == shown
