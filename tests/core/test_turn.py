"""The turn loop against the fake OpenAI server: replies, tools, failures, request layout."""

from __future__ import annotations

import json
from typing import Any

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call


def inbound(text: str, chat_id: str = "alice", **kwargs: Any) -> Inbound:
    return Inbound("terminal", chat_id, text, sender_id="u1", sender_name="Alice", **kwargs)


def stored(runtime: Runtime, chat_id: str = "alice") -> list[tuple[str, str]]:
    chat = runtime.store.find_chat("terminal", chat_id)
    assert chat is not None
    return [(m.role, m.content) for m in runtime.store.history(chat.id)]


async def test_two_turn_conversation_is_stored(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(FakeReply("Hello Alice."), FakeReply("You said your name."))
    first = await runtime.dispatcher(inbound("hi, I'm Alice"))
    second = await runtime.dispatcher(inbound("what did I say?"))
    assert first is not None and first.text == "Hello Alice."
    assert second is not None and second.text == "You said your name."
    assert stored(runtime) == [
        ("user", "hi, I'm Alice"),
        ("assistant", "Hello Alice."),
        ("user", "what did I say?"),
        ("assistant", "You said your name."),
    ]
    second_request = fake_llm.requests[1]["messages"]
    assert [m["content"] for m in second_request if m["role"] != "system"] == [
        "hi, I'm Alice",
        "Hello Alice.",
        "what did I say?",
    ]
    usage = runtime.conn.execute("SELECT kind, prompt_tokens FROM llm_usage").fetchall()
    assert len(usage) == 2 and all(kind == "turn" and tokens > 0 for kind, tokens in usage)


async def test_tool_call_round_trip(runtime: Runtime, fake_llm: FakeOpenAIServer) -> None:
    fake_llm.add(
        FakeReply(tool_calls=[tool_call("get_current_time", {}, "call_1")]),
        FakeReply("It is now."),
    )
    reply = await runtime.dispatcher(inbound("what time is it?"))
    assert reply is not None and reply.text == "It is now."
    second = fake_llm.requests[1]["messages"]
    assert second[-2]["tool_calls"][0]["id"] == "call_1"
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "call_1"
    assert "T" in second[-1]["content"]  # an ISO timestamp
    roles = [role for role, _ in stored(runtime)]
    assert roles == ["user", "assistant", "tool", "assistant"]
    tools = {t["function"]["name"] for t in fake_llm.requests[0]["tools"]}
    assert "get_current_time" in tools


async def test_unknown_tool_and_bad_arguments_go_back_to_the_model(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    bad_args = tool_call("get_current_time", {}, "call_2")
    bad_args["function"]["arguments"] = "{not json"
    fake_llm.add(
        FakeReply(tool_calls=[tool_call("no_such_tool", {}, "call_1"), bad_args]),
        FakeReply("Recovered."),
    )
    reply = await runtime.dispatcher(inbound("do it"))
    assert reply is not None and reply.text == "Recovered."
    results = [m for m in fake_llm.requests[1]["messages"] if m["role"] == "tool"]
    assert "no tool named 'no_such_tool'" in results[0]["content"]
    assert "not valid JSON" in results[1]["content"]


async def test_tool_loop_stops_at_the_iteration_limit(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    runtime.config.agent.max_tool_iterations = 2
    looping = [
        FakeReply(tool_calls=[tool_call("get_current_time", {"n": i}, f"c{i}")]) for i in range(2)
    ]
    fake_llm.add(*looping, FakeReply("Done looping."))
    reply = await runtime.dispatcher(inbound("loop"))
    assert reply is not None and reply.text == "Done looping."
    assert "tools" not in fake_llm.requests[2]
    chat = runtime.store.find_chat("terminal", "alice")
    assert chat is not None
    history = runtime.store.history(chat.id)
    call_ids = {c["id"] for m in history if m.tool_calls for c in m.tool_calls}
    result_ids = {m.tool_call_id for m in history if m.role == "tool"}
    assert call_ids == result_ids == {"c0", "c1"}


async def test_failure_keeps_the_user_message_and_the_chat_recovers(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(FakeReply(status=500, error="upstream exploded"), FakeReply("Back again."))
    failed = await runtime.dispatcher(inbound("first try"))
    assert failed is not None and failed.is_error
    assert "saved" in failed.text and "upstream" not in failed.text
    assert stored(runtime) == [("user", "first try")]
    ok = await runtime.dispatcher(inbound("second try"))
    assert ok is not None and ok.text == "Back again." and not ok.is_error
    assert stored(runtime)[-1] == ("assistant", "Back again.")
    failures = runtime.conn.execute("SELECT count(*) FROM llm_usage WHERE ok = 0").fetchone()[0]
    assert failures == 1


async def test_timeout_gives_a_clear_reply(runtime: Runtime, fake_llm: FakeOpenAIServer) -> None:
    runtime.config.llm.timeout_s = 0.3
    fake_llm.add(FakeReply("too late", delay_s=1.0))
    reply = await runtime.dispatcher(inbound("are you there?"))
    assert reply is not None and reply.is_error and "too long" in reply.text
    assert stored(runtime) == [("user", "are you there?")]


async def test_garbage_answer_is_an_error_not_a_crash(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(FakeReply(raw_body="<html>not json</html>"), FakeReply(raw_body='{"choices": []}'))
    first = await runtime.dispatcher(inbound("one"))
    second = await runtime.dispatcher(inbound("two"))
    assert first is not None and first.is_error
    assert second is not None and second.is_error
    assert [c for r, c in stored(runtime) if r == "user"] == ["one", "two"]


async def test_crash_mid_turn_keeps_the_message(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    class Exploding:
        model = "boom"

        async def complete(self, *args: object, **kwargs: object) -> object:
            raise RuntimeError("bug in a provider")

    real = runtime.agent.llm
    runtime.agent.llm = Exploding()  # type: ignore[assignment]
    crashed = await runtime.dispatcher(inbound("will this survive?"))
    assert crashed is not None and crashed.is_error
    runtime.agent.llm = real
    fake_llm.add(FakeReply("Yes."))
    ok = await runtime.dispatcher(inbound("and now?"))
    assert ok is not None and ok.text == "Yes."
    assert [c for r, c in stored(runtime) if r == "user"] == ["will this survive?", "and now?"]


async def test_hostile_and_huge_messages_are_stored_whole(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    huge = "x" * 300_000
    hostile = "nul\x00byte and a lone surrogate \udc80 end"
    await runtime.dispatcher(inbound(huge))
    await runtime.dispatcher(inbound(hostile))
    chat = runtime.store.find_chat("terminal", "alice")
    assert chat is not None
    everything = runtime.store.messages_between(chat.id, 0, 100)  # compacted ones too
    contents = [m.content for m in everything if m.role == "user"]
    assert contents[0] == huge
    assert contents[1] == "nulbyte and a lone surrogate ? end"
    sent = json.dumps(fake_llm.requests[0]["messages"])
    assert len(sent) < len(huge) and "[truncated:" in sent


async def test_request_layout_keeps_a_stable_prefix(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    from core.api import ContextSection, Extension, TurnContext

    class Counter(Extension):
        calls = 0

        async def context_sections(self, turn: TurnContext) -> list[ContextSection]:
            Counter.calls += 1
            return [ContextSection("notes", "test", f"dynamic fact number {Counter.calls}")]

    runtime.extensions.add(Counter())
    for text in ("one", "two", "three"):
        await runtime.dispatcher(inbound(text))
    requests = [r["messages"] for r in fake_llm.requests]
    assert requests[0][0] == requests[1][0] == requests[2][0]
    static = requests[0][0]["content"]
    assert "Today's date:" in static and "get_current_time" in static
    assert "dynamic fact" not in static
    for number, request in enumerate(requests, start=1):
        assert request[-1]["role"] == "user"
        assert request[-2]["role"] == "system"  # only the line no earlier block showed
        assert request[-2]["content"].count("dynamic fact") == 1
        assert f"dynamic fact number {number}" in request[-2]["content"]
    # Each request is the previous one, its reply, and only then something new: a model
    # server's KV cache serves the whole earlier request.
    for earlier, later in zip(requests, requests[1:], strict=False):
        assert later[: len(earlier)] == earlier
        assert later[len(earlier)]["role"] == "assistant"


async def test_group_messages_show_their_sender_and_unaddressed_ones_are_only_stored(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    quiet = await runtime.dispatcher(
        inbound("I like tea", chat_id="g", chat_kind="group", respond=False)
    )
    assert quiet is None and fake_llm.requests == []
    await runtime.dispatcher(inbound("@bot what do I like?", chat_id="g", chat_kind="group"))
    users = [m["content"] for m in fake_llm.requests[0]["messages"] if m["role"] == "user"]
    assert users == ["[Alice]: I like tea", "[Alice]: @bot what do I like?"]


async def test_help_lists_what_people_can_say_besides_commands(runtime: Runtime) -> None:
    help_reply = await runtime.dispatcher(inbound("/help"))
    assert help_reply is not None
    said = help_reply.text.split("You can also say:\n", 1)[1]
    assert said.startswith("remember: FACT - I store FACT as a memory right away")
    assert "/forget ID" in said


async def test_commands_answer_without_the_model(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    await runtime.dispatcher(inbound("remember the old days"))
    help_reply = await runtime.dispatcher(inbound("/help"))
    assert help_reply is not None and "/reset" in help_reply.text
    reset = await runtime.dispatcher(inbound("/reset@MnemoBot"))
    assert reset is not None and "new session" in reset.text
    await runtime.dispatcher(inbound("fresh start"))
    users = [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "user"]
    assert users == ["fresh start"]
