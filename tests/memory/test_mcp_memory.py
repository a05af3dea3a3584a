"""An MCP server as the memory backend, against a real `MCPServer` (tests.fakes.mcp_memory_server)
started as a stdio subprocess, through real turns with the fake model server: the server's
order is kept, facts reach it, a forgotten memory never comes back through it, and the
database takes over when it crashes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bots.runtime import Runtime, build_runtime
from core import plugin as default_plugin
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.config import Config, McpServerConfig, load_config
from core.errors import ConfigError
from core.mcp import plugin as mcp_plugin
from core.mcp.extension import McpExtension
from memory import plugin as memory_plugin
from memory.backend import LocalBackend
from memory.extension import MemoryExtension
from memory.mcp_backend import McpMemoryBackend, parse_rows

REPO = Path(__file__).resolve().parents[2]
START_S = 60.0


def memory_server(log: Path) -> McpServerConfig:
    env = {"PYTHONPATH": str(REPO), "MEMORY_LOG": str(log)}
    args = ["-m", "tests.fakes.mcp_memory_server"]
    return McpServerConfig(name="memory", command=sys.executable, args=args, env=env)


def extension_of(runtime: Runtime, kind: type[Any]) -> Any:
    return next(ext for ext in runtime.extensions if isinstance(ext, kind))


@contextlib.asynccontextmanager
async def running(config: Config) -> AsyncIterator[Runtime]:
    runtime = build_runtime(config, plugins=[default_plugin, memory_plugin, mcp_plugin])
    services = [asyncio.create_task(s.run()) for s in runtime.extensions.services()]
    try:
        server = extension_of(runtime, McpExtension).servers[0]
        deadline = time.monotonic() + START_S
        while server.state != "up":
            assert time.monotonic() < deadline, server.last_error
            await asyncio.sleep(0.05)
        yield runtime
    finally:
        for task in services:
            task.cancel()
        await asyncio.gather(*services, return_exceptions=True)
        runtime.close()


async def ask(runtime: Runtime, text: str) -> str:
    reply = await runtime.agent.handle(Inbound("terminal", "t", text))
    assert reply is not None and not reply.is_error, reply
    return reply.text


def memory_block(request: dict[str, Any]) -> list[str]:
    """The lines of the newest structured-memory block the request carries ([] when none)."""
    for message in reversed(request["messages"]):
        content = message.get("content") or ""
        if isinstance(content, str) and "<memories" in content:
            return [line for line in content.splitlines() if line.startswith("[")]
    return []


def tool_result(request: dict[str, Any]) -> str:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"][-1]


def mentions(lines: list[str]) -> list[str]:
    return [word for line in lines for word in ("teal", "Tom", "Bob", "Ana") if word in line]


async def test_the_servers_order_is_kept_and_facts_reach_it(
    config: Config, fake_llm: FakeOpenAIServer, tmp_path: Path
) -> None:
    log = tmp_path / "upserts.jsonl"
    config.agent.control_chats = ["terminal:t"]
    config.mcp.servers = [memory_server(log)]
    config.memory.backend = "mcp"
    search = FakeReply(tool_calls=[tool_call("structured_memory_search", {"query": "sister"})])
    fake_llm.add(FakeReply("ok"), search, FakeReply("found"), search, FakeReply("again"))
    async with running(config) as runtime:
        assert (await ask(runtime, "remember: my sister is called Ana")).startswith("Noted.")
        assert (await ask(runtime, "remember: my brother is called Bob")).startswith("Noted.")
        await ask(runtime, "who is my sister?")
        await ask(runtime, "search for her")
        await ask(runtime, "/forget 2")
        store = extension_of(runtime, MemoryExtension).keeper.store
        ana = store.get(1)
        assert ana is not None and ana.chat_id is not None
        store.add(ana.chat_id, "my cat is called Tom", "PROFILE", source="reflector")  # no turn
        await ask(runtime, "search again")
        tools = await ask(runtime, "/tools")
    first, _, second, _, after = fake_llm.requests
    # the database alone would rank Ana first and leave out Bob (no word in common)
    assert mentions(memory_block(first)) == ["teal", "Bob", "Ana"]
    assert not any(name.startswith("memory__") for name in tool_names(first))  # not the model's
    assert "MCP memory: the memory backend (up), not a tool" in tools
    found = tool_result(second)
    assert found.splitlines()[0] == "[PROFILE] The user's favourite colour is teal (server row)"
    assert found.splitlines()[1].startswith("#2 ") and "Bob" in found.splitlines()[1]
    upserts = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(row["chat"], row["id"]) for row in upserts] == [
        ("terminal:t", "1"),
        ("terminal:t", "2"),
        ("terminal:t", "3"),  # the reflector's fact, synced before the next query
    ]
    assert "Bob" in upserts[1]["content"] and "Tom" in upserts[2]["content"]
    # the server's order (newest first); #2 was forgotten here, so its row is dropped
    assert mentions(tool_result(after).splitlines()) == ["teal", "Tom", "Ana"]


async def test_the_database_takes_over_when_the_server_crashes(
    config: Config, fake_llm: FakeOpenAIServer, tmp_path: Path
) -> None:
    config.mcp.servers = [memory_server(tmp_path / "log.jsonl")]
    config.mcp.max_restart_delay = 30.0
    config.memory.backend = "mcp"
    fake_llm.add(FakeReply("still fine"))
    async with running(config) as runtime:
        await ask(runtime, "remember: my sister is called Ana")
        assert await ask(runtime, "crash: who is my sister?") == "still fine"
        backend = extension_of(runtime, MemoryExtension).backend
        assert isinstance(backend, McpMemoryBackend)
        assert backend.fallbacks == 1 and backend.failing
        await ask(runtime, "remember: my brother is called Bob")  # the server is down
        checks = [check.line() for check in backend.checks()]
        listed = await ask(runtime, "/memory")
    assert mentions(memory_block(fake_llm.requests[0])) == ["Ana"]  # the database's ranking
    assert checks[0].startswith("[warn] memory backend (mcp server memory): server down")
    assert "1 queries answered by the database" in checks[0]
    assert "1 facts not sent" in checks[0]
    assert "#2" in listed and "Bob" in listed  # kept in the database, nothing lost


def tool_names(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools") or []]


def test_an_mcp_backend_needs_its_server_configured() -> None:
    with pytest.raises(ConfigError, match=r"\[memory\] mcp_server: .*'memory'"):
        load_config(None, env={"MNEMO_MEMORY_BACKEND": "mcp"})


@pytest.mark.parametrize(
    ("text", "contents"),
    [
        ('[{"content": "a"}, {"text": "b"}]', ["a", None]),
        ('{"results": [{"content": "a"}]}', ["a"]),
        ('{"content": "a"}\n{"content": "b"}', ["a", "b"]),
    ],
)
def test_rows_are_read_from_the_usual_shapes(text: str, contents: list[str | None]) -> None:
    assert [row.get("content") for row in parse_rows(text)] == contents


async def test_forget_says_what_it_cannot_list_or_reach_with_a_memory_server(
    config: Config, tmp_path: Path
) -> None:
    """`/forget` and its suggestions (Discord's autocomplete) act on the database, which holds
    every fact; with a memory server ranking they say that the server's own rows are not
    listed and that the server keeps the copy it was sent. Without one, nothing is added."""
    config.mcp.servers = [memory_server(tmp_path / "log.jsonl")]
    config.memory.backend = "mcp"
    runtime = build_runtime(config, plugins=[default_plugin, memory_plugin, mcp_plugin])
    try:  # the server is not started: facts stay in the database, as in an outage
        await ask(runtime, "remember: my sister is called Ana")
        memory = extension_of(runtime, MemoryExtension)
        chat = runtime.store.find_chat("terminal", "t")
        assert chat is not None
        [forget] = [c for c in memory.commands() if c.name == "forget"]
        assert forget.option is not None
        assert "rows only the memory server memory holds are not listed" in (
            forget.option.description
        )
        assert memory.suggest_forgettable(chat, "ana") == [
            ("1", "#1 [PROFILE] my sister is called Ana")
        ]
        answer = await ask(runtime, "/forget 1")
        assert answer.startswith("Forgotten: #1 ")
        assert "The memory server memory keeps the copy it was sent" in answer
        config.memory.backend = "local"
        memory.backend = LocalBackend(memory.keeper)
        [forget] = [c for c in memory.commands() if c.name == "forget"]
        assert (
            forget.option is not None and forget.option.description == "the memory's number (#12)"
        )
    finally:
        runtime.close()
