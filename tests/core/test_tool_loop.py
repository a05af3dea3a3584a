"""The tool registry and loop: tools that come and go per chat, argument checks, unknown
tools, the per-turn budget of calls, and MCP's schema cleaning and chat allow-list."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from bots.runtime import Runtime
from core.api import Chat, Inbound, Tool, TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.config import Config, McpServerConfig
from core.mcp.extension import chat_allowed
from core.mcp.schema import clean_schema, model_tool_name
from core.tools.registry import argument_problem, coerce_scalars
from tests.core.support import light_runtime


class Shelf:
    """A tool source whose tools the test changes while the bot runs."""

    def __init__(self) -> None:
        self.tools: list[Tool] = []
        self.only_chat = "terminal:t"

    def tools_for(self, chat: Chat) -> list[Tool]:
        return list(self.tools) if chat.key == self.only_chat else []

    def why_missing(self, chat: Chat, name: str) -> str:
        return "the shelf is closed here" if name.startswith("shelf_") else ""


async def shout(turn: TurnContext, args: dict[str, Any]) -> str:
    return str(args["text"]).upper()


SHOUT = Tool(
    "shelf_shout",
    "Shout.",
    shout,
    {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)


@pytest.fixture
def runtime(config: Config) -> Iterator[Runtime]:
    rt = light_runtime(config)
    yield rt
    rt.close()


async def ask(runtime: Runtime, text: str, chat_id: str = "t") -> str:
    reply = await runtime.agent.handle(Inbound("terminal", chat_id, text))
    assert reply is not None and not reply.is_error
    return reply.text


def names(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools") or []]


def results(request: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


async def test_tools_come_and_go_per_chat_and_the_prefix_is_stable_meanwhile(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    shelf = Shelf()
    runtime.extensions.tools.add_source(shelf)
    fake_llm.add(FakeReply("one"), FakeReply("two"))
    await ask(runtime, "a")
    await ask(runtime, "b")
    first, second = fake_llm.requests
    assert first["messages"][0] == second["messages"][0] and first["tools"] == second["tools"]
    shelf.tools.append(SHOUT)
    fake_llm.add(FakeReply(tool_calls=[tool_call("shelf_shout", {"text": "hi"}, "c1")]))
    fake_llm.add(FakeReply("shouted"), FakeReply("other chat"))
    assert await ask(runtime, "shout") == "shouted"
    assert "shelf_shout" in names(fake_llm.requests[2])
    assert results(fake_llm.requests[3]) == {"c1": "HI"}
    await ask(runtime, "shout", chat_id="other")
    assert "shelf_shout" not in names(fake_llm.requests[-1])
    shelf.tools.clear()
    fake_llm.add(FakeReply(tool_calls=[tool_call("shelf_shout", {"text": "x"}, "c2")]))
    fake_llm.add(FakeReply("gone"))
    assert await ask(runtime, "again") == "gone"
    assert "shelf_shout" not in names(fake_llm.requests[-2])
    assert results(fake_llm.requests[-1])["c2"] == (
        "error: tool 'shelf_shout' is not available: the shelf is closed here"
    )


async def test_unknown_tools_and_bad_arguments_come_back_as_errors(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    bad = [
        tool_call("no_such_tool", {}, "c1"),
        tool_call("read_tool_result", {"path": 5}, "c2"),
        tool_call("read_tool_result", {"offset": 1}, "c3"),
    ]
    bad.append({**tool_call("get_current_time", {}, "c4")})
    bad[3]["function"] = {"name": "get_current_time", "arguments": "{not json"}
    fake_llm.add(FakeReply(tool_calls=bad), FakeReply("sorry"))
    assert await ask(runtime, "break things") == "sorry"
    got = results(fake_llm.requests[1])
    assert got["c1"].startswith("error: no tool named 'no_such_tool'; available: ")
    assert got["c2"] == "error: bad arguments for read_tool_result: 'path' must be string, not int"
    assert got["c3"] == "error: bad arguments for read_tool_result: missing required 'path'"
    assert got["c4"].startswith("error: arguments are not valid JSON")


async def test_the_turns_tool_call_budget_stops_further_calls(
    config: Config, runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    config.agent.max_tool_calls = 2
    three = [tool_call("get_current_time", {"n": i}, f"c{i}") for i in range(3)]
    fake_llm.add(FakeReply(tool_calls=three), FakeReply("answered"))
    assert await ask(runtime, "many clocks") == "answered"
    got = results(fake_llm.requests[1])
    assert got["c0"][:2] == got["c1"][:2] == "20"  # ran: ISO timestamps
    assert got["c2"].startswith("error: not run: this turn's budget of 2 tool calls is spent")
    assert "tools" not in fake_llm.requests[1]  # asked to answer without tools


async def test_calls_of_one_response_run_concurrently_in_call_order(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    started: list[str] = []
    gate = asyncio.Event()

    async def wait(turn: TurnContext, args: dict[str, Any]) -> str:
        started.append(args["name"])
        if len(started) == 2:
            gate.set()
        await asyncio.wait_for(gate.wait(), 5)  # only ends if both run at once
        return f"done {args['name']}"

    shelf = Shelf()
    shelf.tools.append(Tool("shelf_wait", "Wait.", wait))
    runtime.extensions.tools.add_source(shelf)
    pair = [tool_call("shelf_wait", {"name": n}, n) for n in ("b", "a")]
    fake_llm.add(FakeReply(tool_calls=pair), FakeReply("both"))
    assert await ask(runtime, "wait twice") == "both"
    assert list(results(fake_llm.requests[1]).items()) == [("b", "done b"), ("a", "done a")]


def test_argument_problem_is_shallow_and_exact() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "x": {"type": ["number", "null"]}},
        "required": ["n"],
        "additionalProperties": False,
    }
    assert argument_problem(schema, {"n": 1, "x": None}) == ""
    assert argument_problem(schema, {"n": True}) == "'n' must be integer, not bool"
    assert argument_problem(schema, {"n": 1, "y": 2}) == "unknown 'y'"
    assert argument_problem({"type": "object"}, {"anything": [1]}) == ""
    quoted = coerce_scalars(schema, {"n": " 7", "x": "1.5"})
    assert quoted == {"n": 7, "x": 1.5} and argument_problem(schema, quoted) == ""
    assert coerce_scalars(schema, {"n": "seven"}) == {"n": "seven"}


def test_schemas_are_cleaned_for_strict_model_servers() -> None:
    raw = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$defs": {
            "Place": {"type": "object", "properties": {"url": {"type": "string", "format": "uri"}}},
        },
        "properties": {
            "place": {"$ref": "#/$defs/Place", "description": "where"},
            "when": {"type": "string", "format": "date-time"},
            "other": {"$ref": "https://example.com/remote.json"},
        },
        "required": ["place", "ghost"],
    }
    cleaned = clean_schema(raw)
    assert cleaned == {
        "properties": {
            "place": {
                "type": "object",
                "properties": {"url": {"type": "string"}},
                "description": "where",
            },
            "when": {"type": "string", "format": "date-time"},
            "other": {},
        },
        "required": ["place"],
        "type": "object",
    }
    assert clean_schema(None) == {"type": "object", "properties": {}}
    looped = {"$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}}}
    assert clean_schema({**looped, "properties": {"n": {"$ref": "#/$defs/N"}}})["type"] == "object"
    assert model_tool_name("files", "read.file/v2") == "files__read_file_v2"


def test_who_may_use_a_server() -> None:
    chat = Chat(1, "telegram", "123", "", "private")
    server = McpServerConfig(name="s", command="x")
    assert not chat_allowed(server, [], chat)
    assert chat_allowed(server, ["telegram:123"], chat)
    for allowed in (["*"], ["telegram:*"], ["telegram:123"]):
        assert chat_allowed(server.model_copy(update={"chats": allowed}), [], chat)
    for refused in (["discord:*"], ["telegram:12"], ["terminal:123"]):
        assert not chat_allowed(server.model_copy(update={"chats": refused}), ["*"], chat)
