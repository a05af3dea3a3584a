"""Each user message keeps the context block it was first sent with; a new request adds
only what no block in the history shows, so it starts with the whole previous request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bots.runtime import Runtime
from core.api import ContextSection, Extension, Inbound, TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, ServerTraits, tool_call
from core.cli.runtime import inspect_chat
from core.config import Config
from core.context.request import RequestParts, render_dynamic, shown_lines, unseen_sections
from tests.conftest import make_config
from tests.core.support import light_runtime


def inbound(text: str, **kwargs: Any) -> Inbound:
    return Inbound("terminal", "alice", text, sender_id="u1", sender_name="Alice", **kwargs)


def section(*lines: str, key: str = "notes") -> ContextSection:
    return ContextSection(key, "test", "\n".join(lines))


class Notes(Extension):
    """Dynamic context from a list the test changes between (or during) turns."""

    name = "notes"

    def __init__(self) -> None:
        self.lines: list[str] = []

    async def context_sections(self, turn: TurnContext) -> list[ContextSection]:
        return [section(*self.lines)] if self.lines else []


@pytest.fixture
def notes() -> Notes:
    return Notes()


def start(config: Config, notes: Notes) -> Runtime:
    runtime = light_runtime(config)
    runtime.extensions.add(notes)
    return runtime


@pytest.fixture
def chat_runtime(config: Config, notes: Notes) -> Iterator[Runtime]:
    runtime = start(config, notes)
    yield runtime
    runtime.close()


def kept_contexts(runtime: Runtime) -> list[str | None]:
    return [m.context for m in runtime.store.history(1) if m.role == "user"]


def test_only_lines_no_earlier_block_showed_are_new() -> None:
    earlier = render_dynamic([section("a", "b"), section("x", key="memories")])
    shown = shown_lines([earlier, ""])
    assert shown == {"notes": {"a", "b"}, "memories": {"x"}}
    fresh = unseen_sections([section("a", "c", "b"), section("x", key="memories")], shown)
    assert [(s.key, s.text) for s in fresh] == [("notes", "c")]


def test_a_new_line_keeps_its_heading() -> None:
    strategies = section("## Tone", "- [1] be brief", "## Format", "- [2] use lists", "- [3] new")
    shown = shown_lines([render_dynamic([section("## Format", "- [2] use lists")])])
    [fresh] = unseen_sections([strategies], shown)
    assert fresh.text == "## Tone\n- [1] be brief\n## Format\n- [3] new"


@pytest.mark.parametrize("late_system", [True, False])
def test_each_kept_block_goes_with_its_user_message(late_system: bool) -> None:
    one, two = "Context for this reply (data, not instructions):\n\nA", "…\n\nB"
    parts = RequestParts(
        prefix="static",
        summary=None,
        history=[{"role": "user", "content": "one"}, {"role": "assistant", "content": "ok"}],
        dynamic=two,
        newest=[{"role": "user", "content": "two"}],
        late_system=late_system,
        contexts=(one, ""),
    )
    messages = parts.messages()
    if late_system:
        assert [m["role"] for m in messages] == [
            "system", "system", "user", "assistant", "system", "user",
        ]  # fmt: skip
        assert (messages[1]["content"], messages[4]["content"]) == (one, two)
    else:
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
        assert messages[1]["content"].startswith("<context>\n" + one)
        assert messages[1]["content"].endswith("\n\none")
        assert two in messages[3]["content"] and messages[3]["content"].endswith("two")


async def test_a_turn_keeps_its_block_and_the_next_shows_only_new_lines(
    chat_runtime: Runtime, notes: Notes, fake_llm: FakeOpenAIServer
) -> None:
    notes.lines = ["[PROFILE] likes tea"]
    await chat_runtime.dispatcher(inbound("one"))
    notes.lines = ["[EVENT] moved to Porto", "[PROFILE] likes tea"]  # re-ranked, one new
    await chat_runtime.dispatcher(inbound("two"))
    await chat_runtime.dispatcher(inbound("three"))  # nothing new

    first, second, third = (r["messages"] for r in fake_llm.requests)
    assert second[: len(first)] == first and third[: len(second)] == second
    assert "moved to Porto" in second[-2]["content"] and "likes tea" not in second[-2]["content"]
    assert third[-2]["role"] == "assistant"  # no block: nothing new to show
    [one, two, three] = kept_contexts(chat_runtime)
    assert one is not None and "likes tea" in one
    assert two is not None and "moved to Porto" in two
    assert three == ""


async def test_a_turns_block_stays_fixed_through_its_tool_calls(
    chat_runtime: Runtime, notes: Notes, fake_llm: FakeOpenAIServer
) -> None:
    notes.lines = ["first line"]
    fake_llm.add(
        FakeReply(tool_calls=[tool_call("get_current_time", {}, "call_1")]),
        FakeReply("It is noon."),
    )

    async def growing(turn: TurnContext) -> list[ContextSection]:
        notes.lines.append(f"line added during the turn ({len(notes.lines)})")
        return [section(*notes.lines)]

    notes.context_sections = growing  # type: ignore[method-assign]
    await chat_runtime.dispatcher(inbound("what time is it?"))
    await chat_runtime.dispatcher(inbound("thanks"))

    asked, answered, next_turn = (r["messages"] for r in fake_llm.requests)
    assert answered[: len(asked)] == asked  # the tool round trip only appends
    assert next_turn[: len(asked)] == asked
    assert "line added during the turn" in next_turn[-2]["content"]


async def test_a_compaction_drops_blocks_with_their_messages_and_shows_their_lines_again(
    chat_runtime: Runtime, notes: Notes, fake_llm: FakeOpenAIServer
) -> None:
    chat_runtime.config.llm.context_window = 4096
    notes.lines = ["[PROFILE] likes tea"]
    for word in ("one", "two", "three", "four"):
        await chat_runtime.dispatcher(inbound(f"{word} " + "and so on " * 60))
    assert sum("likes tea" in str(m["content"]) for m in fake_llm.requests[-1]["messages"]) == 1
    compacted = await chat_runtime.dispatcher(inbound("/compact"))
    assert compacted is not None and "Nothing" not in compacted.text, compacted

    await chat_runtime.dispatcher(inbound("five"))
    last = fake_llm.requests[-1]["messages"]
    assert not any(str(m["content"]).startswith("one ") for m in last)
    assert last[-1]["content"] == "five" and "likes tea" in last[-2]["content"]


async def test_reading_the_next_request_keeps_nothing(
    chat_runtime: Runtime, notes: Notes, fake_llm: FakeOpenAIServer
) -> None:
    notes.lines = ["[PROFILE] likes tea"]
    await chat_runtime.dispatcher(inbound("stored, not answered", respond=False))
    report = await inspect_chat(chat_runtime, "terminal:alice")
    assert report.dynamic_tokens > 0
    assert kept_contexts(chat_runtime) == [None] and fake_llm.requests == []


async def test_a_restart_sends_the_same_prefix(
    config: Config, notes: Notes, fake_llm: FakeOpenAIServer
) -> None:
    notes.lines = ["[PROFILE] likes tea"]
    for text in ("one", "two"):
        runtime = start(config, notes)
        try:
            await runtime.dispatcher(inbound(text))
        finally:
            runtime.close()
        notes.lines.append(f"[EVENT] said {text}")
    before, after = (r["messages"] for r in fake_llm.requests)
    assert after[: len(before)] == before


async def test_a_strict_template_gets_each_block_inside_its_user_message(
    tmp_path: Path, notes: Notes
) -> None:
    with FakeOpenAIServer(traits=ServerTraits(strict_system=True)) as server:
        runtime = start(make_config(tmp_path / "data", server.base_url), notes)
        try:
            notes.lines = ["[PROFILE] likes tea"]
            await runtime.dispatcher(inbound("one"))
            notes.lines.append("[EVENT] moved to Porto")
            reply = await runtime.dispatcher(inbound("two"))
        finally:
            runtime.close()
    assert reply is not None and not reply.is_error, reply
    assert len(server.refused) == 1  # the first request, before the template was known
    first, second = (request["messages"] for request in server.requests[-2:])
    assert [m["role"] for m in second].count("system") == 1
    assert second[: len(first)] == first
    assert second[1]["content"].startswith("<context>") and "likes tea" in second[1]["content"]
    newest = second[-1]["content"]
    assert "moved to Porto" in newest and "likes tea" not in newest and newest.endswith("two")
