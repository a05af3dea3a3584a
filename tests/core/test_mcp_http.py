"""MCP over streamable HTTP against the real `MCPServer` (core.bench.fakes.mcp_server) run as a
subprocess on 127.0.0.1: the connection is kept alive between calls, a hang times out, a
crash mid-call is a tool error and the server is used again once it is back, and the bearer
token from the environment reaches the server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator

import httpx2
import pytest

from core.config import McpServerConfig
from core.errors import ToolError
from core.mcp.bench import free_port, listening, self_connected
from core.mcp.connection import MAX_SSE_EVENT_BYTES, McpServer, McpTool
from core.mcp.http_session import McpHttpSession, http_client
from tests.conftest import mcp_http_server
from tests.core.test_mcp import START_S, until_up


def serving(
    port: int, *flags: str, token: str = ""
) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """The test server over HTTP on `port` until the block ends (or it crashes), forked from
    the warm MCP process (`tests.conftest.mcp_http_server`)."""
    return mcp_http_server(port, *flags, env={**os.environ, "MNEMO_TEST_MCP_TOKEN": token})


@contextlib.asynccontextmanager
async def connected(config: McpServerConfig) -> AsyncIterator[McpServer]:
    server = McpServer(config, max_restart_delay=1.0)
    task = asyncio.create_task(server.run())
    try:
        yield server
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def tool(server: McpServer, name: str) -> McpTool:
    return next(t for t in server.tools if t.remote_name == name)


def test_a_connection_to_itself_is_not_a_listening_server() -> None:
    """Waiting for a server, a connect whose source port the kernel picked equal to the
    server's connects to itself before the server is up (a flaky ConnectError next)."""
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.connect(("127.0.0.1", port))  # TCP simultaneous open with itself
        assert self_connected(sock)
    assert not listening(port)
    with socket.create_server(("127.0.0.1", 0)) as server:
        assert listening(server.getsockname()[1])


@pytest.mark.parametrize("flags", [(), ("json",)], ids=["sse", "json"])
async def test_calls_share_one_kept_alive_connection(flags: tuple[str, ...]) -> None:
    """The server answers each call as an SSE stream (the SDK's default) or one JSON body;
    either way the calls reuse the connection instead of opening one each (the SDK's
    transport stopped reading an SSE answer early, and httpx dropped the connection)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    ports: list[int] = []

    async def note_port(response: httpx2.Response) -> None:
        if b'"tools/call"' in response.request.content:
            stream = response.extensions["network_stream"]
            ports.append(stream.get_extra_info("client_addr")[1])

    with serving(port, *flags):
        async with http_client({}) as client:
            client.event_hooks = {"response": [note_port]}
            async with McpHttpSession(url, client, lambda: None, MAX_SSE_EVENT_BYTES) as session:
                await session.initialize()
                for index in range(12):
                    result = await session.call_tool("echo", {"text": f"call {index}"})
                    assert result.content[0].text == f"call {index}"  # type: ignore[union-attr]
    assert len(ports) == 12
    assert len(set(ports)) <= 2, ports  # a new connection per call with the SDK's: 12


async def test_a_hang_over_http_times_out_and_the_next_call_works() -> None:
    port = free_port()
    config = McpServerConfig(name="h", url=f"http://127.0.0.1:{port}/mcp", timeout=1.0)
    with serving(port):
        async with connected(config) as server:
            await until_up(server)
            started = time.monotonic()
            with pytest.raises(ToolError, match="timed out after 1 s"):
                await server.call(tool(server, "hang"), {})
            assert time.monotonic() - started < 10
            assert await server.call(tool(server, "echo"), {"text": "still here"}) == "still here"
            assert server.state == "up" and server.restarts == 0


async def test_a_crash_over_http_is_a_tool_error_and_the_server_is_used_again() -> None:
    port = free_port()
    config = McpServerConfig(name="h", url=f"http://127.0.0.1:{port}/mcp", timeout=20.0)
    async with connected(config) as server:
        with serving(port):
            await until_up(server)
            with pytest.raises(ToolError, match="being restarted"):
                await server.call(tool(server, "crash"), {})
            assert server.state == "down" and not server.tools
            with pytest.raises(ToolError, match="MCP server h is down"):
                await server.call(tool_named("h__echo", "echo"), {"text": "x"})
        with serving(port):  # the server comes back on the same address
            await until_up(server, restarts=1)
            assert await server.call(tool(server, "echo"), {"text": "back"}) == "back"


def tool_named(name: str, remote: str) -> McpTool:
    return McpTool(name, remote, "", {"type": "object", "properties": {}})


async def test_the_bearer_token_from_the_environment_reaches_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    monkeypatch.setenv("MNEMO_TEST_TOKEN", "s3cret")
    with_token = McpServerConfig(name="ok", url=url, bearer_token_env="MNEMO_TEST_TOKEN")
    without = McpServerConfig(name="no", url=url)
    with serving(port, token="s3cret"):
        async with connected(with_token) as good, connected(without) as bad:
            await until_up(good)
            assert await good.call(tool(good, "echo"), {"text": "authorised"}) == "authorised"
            deadline = time.monotonic() + START_S
            while bad.state != "down":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            assert not bad.tools
            assert "HTTP 401 Unauthorized (check headers and bearer_token_env)" in bad.last_error
