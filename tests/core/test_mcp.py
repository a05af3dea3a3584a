"""MCP servers as tools, against a real `MCPServer` (core.bench.fakes.mcp_server) started as a
subprocess over stdio and over streamable HTTP on 127.0.0.1, and the fake model server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from bots.runtime import Runtime, build_runtime
from core import plugin as default_plugin
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.config import Config, McpServerConfig, load_config
from core.errors import ConfigError, ToolError
from core.mcp import bench as mcp_bench
from core.mcp import plugin as mcp_plugin
from core.mcp.connection import STDIO_NICENESS, McpServer, niced_command
from core.mcp.extension import McpExtension, probe, server_check
from tests.conftest import mcp_http_server, mcp_server_command

START_S = 60.0  # the test server imports the SDK; slow on a busy machine
SERVER = [sys.executable, "-m", "core.bench.fakes.mcp_server"]


REPO = Path(__file__).resolve().parents[2]


def stdio_server(name: str = "t", cold: bool = False, **values: Any) -> McpServerConfig:
    """The test server over stdio: forked from the warm MCP process (`tests/warm_exec.py`
    stands for it), or, `cold`, `python -m core.bench.fakes.mcp_server stdio` itself."""
    command, args = (SERVER[0], [*SERVER[1:], "stdio"]) if cold else mcp_server_command("stdio")
    env = {"PYTHONPATH": str(REPO)}  # a stdio server gets a minimal environment otherwise
    return McpServerConfig(name=name, command=command, args=args, env=env, **values)


def mcp_of(runtime: Runtime) -> McpExtension:
    found = [ext for ext in runtime.extensions if isinstance(ext, McpExtension)]
    assert found
    return found[0]


async def until_up(server: McpServer, restarts: int = 0) -> None:
    deadline = time.monotonic() + START_S
    while not (server.state == "up" and server.restarts >= restarts):
        assert time.monotonic() < deadline, f"{server.name}: {server.state} {server.last_error}"
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running(config: Config) -> AsyncIterator[Runtime]:
    """A runtime with the built-ins and MCP, its servers connected. The window is wide
    enough for every tool the test server lists: these tests are about MCP, not about which
    tools a small window leaves out (tests/core/test_tool_cost.py, test_small_window.py)."""
    config.llm.context_window = config.llm.context_window or 16_384
    runtime = build_runtime(config, plugins=[default_plugin, mcp_plugin])
    services = [asyncio.create_task(s.run()) for s in runtime.extensions.services()]
    try:
        for server in mcp_of(runtime).servers:
            await until_up(server)
        yield runtime
    finally:
        for task in services:
            task.cancel()
        await asyncio.gather(*services, return_exceptions=True)
        runtime.close()


async def ask(runtime: Runtime, text: str, chat_id: str = "t") -> str:
    reply = await runtime.agent.handle(Inbound("terminal", chat_id, text))
    assert reply is not None and not reply.is_error, reply
    return reply.text


def tool_results(request: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


def tool_names(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools") or []]


def calls(*items: tuple[str, dict[str, Any], str]) -> FakeReply:
    return FakeReply(tool_calls=[tool_call(name, args, call_id) for name, args, call_id in items])


async def test_stdio_tools_are_listed_cleaned_and_called_concurrently_through_a_turn(
    config: Config, fake_llm: FakeOpenAIServer
) -> None:
    config.mcp.servers = [stdio_server(chats=["terminal:*"])]
    fake_llm.add(
        calls(
            ("t__echo", {"text": "hi"}, "c1"),
            ("t__work", {"ms": 600}, "c2"),
            ("t__work", {"ms": 601}, "c3"),
        ),  # fmt: skip
        FakeReply("done"),
    )
    async with running(config) as runtime:
        assert await ask(runtime, "use the tools") == "done"
    first, second = fake_llm.requests
    names = tool_names(first)
    assert {"t__echo", "t__open_page", "t__work"} <= set(names)
    assert names.index("get_current_time") < names.index("t__big")  # fixed tools first
    assert "t__echo" in first["messages"][0]["content"]  # the static prefix names them
    page = [t for t in first["tools"] if t["function"]["name"] == "t__open_page"]
    schema = json.dumps(page[0]["function"]["parameters"])
    assert "$ref" not in schema and "$defs" not in schema and '"uri"' not in schema
    results = tool_results(second)
    assert list(results) == ["c1", "c2", "c3"] and results["c1"] == "hi"
    (start2, end2), (start3, end3) = (map(float, results[c].split()) for c in ("c2", "c3"))
    assert start3 < end2 and start2 < end3  # the two 600 ms calls overlapped


async def test_a_chat_not_allowed_never_sees_nor_calls_the_servers_tools(
    config: Config, fake_llm: FakeOpenAIServer
) -> None:
    config.mcp.servers = [stdio_server(chats=["terminal:ok"])]
    fake_llm.add(calls(("t__echo", {"text": "sneak"}, "c1")), FakeReply("no luck"))
    async with running(config) as runtime:
        assert await ask(runtime, "call it anyway", chat_id="other") == "no luck"
        refused = await ask(runtime, "/tools", chat_id="other")
        allowed = await ask(runtime, "/tools", chat_id="ok")
    assert not any(name.startswith("t__") for name in tool_names(fake_llm.requests[0]))
    assert "t__echo" not in fake_llm.requests[0]["messages"][0]["content"]
    result = tool_results(fake_llm.requests[1])["c1"]
    assert result.startswith("error:") and "not open to this chat" in result
    assert "MCP t: refused in this chat" in refused and "get_current_time" in refused
    assert "t__echo" in allowed


async def test_the_default_is_control_chats_only(
    config: Config, fake_llm: FakeOpenAIServer
) -> None:
    config.agent.control_chats = ["terminal:boss"]
    config.mcp.servers = [stdio_server()]
    fake_llm.add(FakeReply("a"), FakeReply("b"))
    async with running(config) as runtime:
        await ask(runtime, "hi", chat_id="boss")
        await ask(runtime, "hi", chat_id="guest")
    boss, guest = (tool_names(request) for request in fake_llm.requests)
    assert "t__echo" in boss and "t__echo" not in guest


async def test_a_crash_mid_call_is_a_tool_error_then_the_server_restarts(
    config: Config, fake_llm: FakeOpenAIServer
) -> None:
    config.mcp.servers = [stdio_server(chats=["*"])]
    config.mcp.max_restart_delay = 1.0
    fake_llm.add(calls(("t__crash", {}, "c1")), FakeReply("it crashed"))
    fake_llm.add(FakeReply("while down"))
    fake_llm.add(calls(("t__echo", {"text": "back"}, "c2")), FakeReply("fine again"))
    async with running(config) as runtime:
        server = mcp_of(runtime).servers[0]
        assert await ask(runtime, "crash it") == "it crashed"
        assert server.state == "down" and not server.tools  # restarting waits 1 s first
        assert await ask(runtime, "still there?") == "while down"
        down_request = fake_llm.requests[-1]
        assert "t__echo" not in tool_names(down_request)
        assert "MCP server t is down (failed during t__crash" in json.dumps(down_request)
        await until_up(server, restarts=1)
        assert await ask(runtime, "again") == "fine again"
    crash_result = tool_results(fake_llm.requests[1])["c1"]
    assert crash_result.startswith("error:") and "being restarted" in crash_result
    assert tool_results(fake_llm.requests[-1])["c2"] == "back"


def server_niceness(marker: str) -> list[int]:
    """The niceness of each running process whose command line holds `marker` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        program = Path(cmdline.split(b"\0")[0].decode(errors="replace")).name
        if entry.name.isdigit() and marker.encode() in cmdline and program != "nice":
            found.append(os.getpriority(os.PRIO_PROCESS, int(entry.name)))
    return found


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="reads /proc")
async def test_a_stdio_server_runs_below_the_bots_cpu_priority(config: Config) -> None:
    """On a small machine a server starting or working never takes the CPU from a reply."""
    marker = f"priority-check-{os.getpid()}"
    server = stdio_server(chats=["*"], cold=True)  # the server's own process, not a stand-in
    server.args = [*server.args, marker]  # an extra argument the test server ignores
    config.mcp.servers = [server]
    async with running(config) as runtime:
        await until_up(mcp_of(runtime).servers[0])
        assert server_niceness(marker) == [min(19, os.nice(0) + STDIO_NICENESS)]


def test_a_command_that_does_not_resolve_is_started_as_written() -> None:
    assert niced_command("no-such-server-xyz", ["a"], None) == ("no-such-server-xyz", ["a"])
    command, args = niced_command(sys.executable, ["-V"], None)
    assert Path(command).name == "nice" and args[-1] == "-V"


async def test_a_hanging_call_times_out_as_a_tool_error(
    config: Config, fake_llm: FakeOpenAIServer
) -> None:
    config.mcp.servers = [stdio_server(chats=["*"], timeout=1.0)]
    fake_llm.add(calls(("t__hang", {}, "c1")), FakeReply("gave up"))
    async with running(config) as runtime:
        started = time.monotonic()
        assert await ask(runtime, "hang") == "gave up"
        assert time.monotonic() - started < 10
    assert "timed out after 1 s" in tool_results(fake_llm.requests[1])["c1"]


async def test_tools_listed_again_on_list_changed(
    config: Config, fake_llm: FakeOpenAIServer
) -> None:
    config.mcp.servers = [stdio_server(chats=["*"])]
    fake_llm.add(calls(("t__grow", {}, "c1")), FakeReply("grown"), FakeReply("next"))
    async with running(config) as runtime:
        server = mcp_of(runtime).servers[0]
        await ask(runtime, "grow")
        deadline = time.monotonic() + 10
        while "t__late_tool" not in [tool.name for tool in server.tools]:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await ask(runtime, "what now?")
    assert "t__late_tool" not in tool_names(fake_llm.requests[0])
    assert "t__late_tool" in tool_names(fake_llm.requests[-1])


@pytest.fixture
def http_server() -> Iterator[str]:
    port = mcp_bench.free_port()
    with mcp_http_server(port):
        yield f"http://127.0.0.1:{port}/mcp"


async def test_http_server_call_and_a_10_mb_result_is_stored_and_excerpted(
    config: Config, fake_llm: FakeOpenAIServer, http_server: str
) -> None:
    config.mcp.servers = [McpServerConfig(name="web", url=http_server, chats=["*"], timeout=60)]
    fake_llm.add(
        calls(
            ("web__echo", {"text": "over http"}, "c1"),
            ("web__big", {"chars": 10_000_000}, "c2"),
        ),
        FakeReply("big one"),
    )
    async with running(config) as runtime:
        assert await ask(runtime, "fetch big") == "big one"
    results = tool_results(fake_llm.requests[1])
    assert results["c1"] == "over http"
    assert "tool result of 10000000 chars stored in full at" in results["c2"]
    assert len(results["c2"]) <= config.context.tool_result_max_chars
    stored = list((config.storage.data_dir).rglob("*web__big*"))
    assert len(stored) == 1 and stored[0].stat().st_size == 10_000_000


async def test_doctor_lines_for_a_working_and_a_broken_server(tmp_path: Path) -> None:
    good = McpServer(stdio_server("good"), log_dir=tmp_path)
    bad = McpServer(McpServerConfig(name="bad", command=str(tmp_path / "no-such-server")))
    said = "import sys; sys.stderr.write('boom: FILES_ROOT is not set\\n'); sys.exit(1)"
    noisy = McpServer(
        McpServerConfig(name="noisy", command=sys.executable, args=["-c", said]), log_dir=tmp_path
    )
    await asyncio.gather(probe(good), probe(bad), probe(noisy))
    good_line, bad_line, noisy_line = server_check(good), server_check(bad), server_check(noisy)
    assert good_line.ok and good_line.detail.startswith("7 tools")
    assert not bad_line.ok and "no-such-server" in bad_line.detail
    assert not noisy_line.ok and "it said: boom: FILES_ROOT is not set" in noisy_line.detail
    assert "\n" not in bad_line.detail + noisy_line.detail


def test_servers_from_the_environment_and_bad_config() -> None:
    servers = [{"name": "files", "command": "npx", "args": ["-y", "x"], "chats": ["terminal:*"]}]
    config = load_config(None, env={"MNEMO_MCP_SERVERS": json.dumps(servers)})
    assert [s.name for s in config.mcp.servers] == ["files"]
    assert config.mcp.servers[0].chats == ["terminal:*"]
    with pytest.raises(ConfigError, match="MNEMO_MCP_SERVERS"):
        load_config(None, env={"MNEMO_MCP_SERVERS": "[{"})
    with pytest.raises(ConfigError, match="either command"):
        load_config(None, env={"MNEMO_MCP_SERVERS": '[{"name": "x"}]'})
    both = [{"name": "a", "url": "http://h/mcp"}, {"name": "a", "url": "http://h/mcp"}]
    with pytest.raises(ConfigError, match="unique"):
        load_config(None, env={"MNEMO_MCP_SERVERS": json.dumps(both)})


async def test_a_server_that_never_answers_blocks_neither_start_nor_a_turn(
    config: Config, fake_llm: FakeOpenAIServer
) -> None:
    mute = [sys.executable, "-c", "import time; time.sleep(60)"]
    config.mcp.servers = [
        McpServerConfig(name="mute", command=mute[0], args=mute[1:], chats=["*"], timeout=1)
    ]
    fake_llm.add(calls(("mute__echo", {"text": "x"}, "c1")), FakeReply("answered anyway"))
    runtime = build_runtime(config, plugins=[default_plugin, mcp_plugin])
    services = [asyncio.create_task(s.run()) for s in runtime.extensions.services()]
    try:
        started = time.monotonic()
        assert await ask(runtime, "hello") == "answered anyway"
        assert time.monotonic() - started < 20  # the mute server sleeps 60 s
        assert "mute__" not in json.dumps(fake_llm.requests[0].get("tools"))
        assert "MCP server mute is starting" in json.dumps(fake_llm.requests[0]["messages"])
        result = tool_results(fake_llm.requests[1])["c1"]
        assert result == "error: tool 'mute__echo' is not available: MCP server mute is starting"
    finally:
        for task in services:
            task.cancel()
        await asyncio.gather(*services, return_exceptions=True)
        runtime.close()


async def test_servers_start_after_the_first_turn_not_during_it(
    config: Config, fake_llm: FakeOpenAIServer
) -> None:
    """A message that arrives as the bot starts is answered before the servers start (their
    start imports the SDK, a second of CPU); its tools are absent, the next turn has them."""
    config.mcp.servers = [stdio_server(chats=["*"])]
    fake_llm.add(FakeReply("first", delay_s=1.0), FakeReply("second"))
    runtime = build_runtime(config, plugins=[default_plugin, mcp_plugin])
    mcp = mcp_of(runtime)
    turn = asyncio.create_task(ask(runtime, "hello"))
    for _ in range(1000):  # the message arrived, its turn began: now the bot starts
        if runtime.agent.activity.running:
            break
        await asyncio.sleep(0.01)
    services = [asyncio.create_task(s.run()) for s in runtime.extensions.services()]
    try:
        await asyncio.sleep(0.6)  # the turn waits for the model: the bot is busy
        assert mcp.service.started and not mcp.service.connecting
        assert await turn == "first"
        assert "t__" not in json.dumps(fake_llm.requests[0].get("tools"))
        await until_up(mcp.servers[0])  # started in the lull after the turn
        assert await ask(runtime, "again") == "second"
        assert "t__echo" in tool_names(fake_llm.requests[1])
    finally:
        for task in [turn, *services]:
            task.cancel()
        await asyncio.gather(turn, *services, return_exceptions=True)
        runtime.close()


def test_http_headers_carry_the_bearer_token_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = McpServerConfig(
        name="s", url="http://127.0.0.1:1/mcp", headers={"X-Team": "ops"}, bearer_token_env="TOK"
    )
    monkeypatch.setenv("TOK", "secret-1")
    assert McpServer(config).headers() == {"X-Team": "ops", "Authorization": "Bearer secret-1"}
    monkeypatch.delenv("TOK")
    with pytest.raises(ToolError, match="TOK is not set"):
        McpServer(config).headers()


LOOP_LAG = """
import asyncio, sys, time
from core.config import McpServerConfig
from core.mcp.connection import STDIO_NICENESS, McpServer, niced_command

async def main():
    gaps, began = [], time.monotonic()
    mute = ["-c", "import time; time.sleep(30)"]
    server = McpServer(McpServerConfig(name="m", command=sys.executable, args=mute))
    task = asyncio.create_task(server.run())
    while "core.mcp.http_session" not in sys.modules or len(gaps) < 5:
        tick = time.monotonic()
        await asyncio.sleep(0.005)
        gaps.append(time.monotonic() - tick)
    task.cancel()
    print(max(gaps), time.monotonic() - began)

asyncio.run(main())
"""


def test_starting_a_server_does_not_hold_up_the_event_loop_while_the_sdk_loads() -> None:
    """The SDK's import (about a second of CPU) runs in a thread, so a turn that starts while
    the servers come up keeps going; on the loop it would stop everything for all of it."""
    done = subprocess.run(
        [sys.executable, "-c", LOOP_LAG], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    longest_gap, loading = map(float, done.stdout.split())
    assert longest_gap < loading / 2, (longest_gap, loading)
