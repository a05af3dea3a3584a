"""Mnemo's own streamable-HTTP MCP client (`core.mcp.http_session`) on the wire, against the
real `MCPServer` (core.bench.fakes.mcp_server) as a subprocess on 127.0.0.1: the session id and
protocol version on every request, SSE and JSON answers, `tools/list_changed` over the GET
event stream, an expired session renewed, a DELETE at the end, and a server that answers 429
or 500 or drops the connection mid-call: a tool error the model reads, never a failed turn."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator

import httpx2
import pytest

from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.config import Config, McpServerConfig
from core.errors import ToolError
from core.mcp.bench import free_port
from core.mcp.connection import MAX_SSE_EVENT_BYTES
from core.mcp.http_session import SESSION_HEADER, VERSION_HEADER, McpHttpSession, http_client
from tests.core.test_mcp import ask, calls, running, tool_results, until_up
from tests.core.test_mcp_http import connected, serving, tool

FLAGS = pytest.mark.parametrize("flags", [(), ("json",)], ids=["sse", "json"])


class Recorder:
    """Every request the client sends (method, headers) and how often the tools changed."""

    def __init__(self) -> None:
        self.sent: list[httpx2.Request] = []
        self.changes = 0

    async def note(self, request: httpx2.Request) -> None:
        self.sent.append(request)

    def changed(self) -> None:
        self.changes += 1


@pytest.fixture
def url() -> Iterator[str]:
    port = free_port()
    with serving(port):
        yield f"http://127.0.0.1:{port}/mcp"


@contextlib.asynccontextmanager
async def session_on(url: str, recorder: Recorder) -> AsyncIterator[McpHttpSession]:
    """A session with the server at `url` (not yet initialized), its requests recorded."""
    async with http_client({"X-Team": "ops"}) as client:
        client.event_hooks = {"request": [recorder.note]}
        async with McpHttpSession(url, client, recorder.changed, MAX_SSE_EVENT_BYTES) as session:
            yield session


async def until(check: object, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)


@FLAGS
async def test_a_session_sends_its_id_and_version_then_deletes_itself(
    flags: tuple[str, ...],
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    recorder = Recorder()
    with serving(port, *flags):
        async with session_on(url, recorder) as session:
            await session.initialize()
            sid, version = session.session_id, session.version
            listed = await session.list_tools()
            assert "echo" in {t.name for t in listed.tools}
            result = await session.call_tool("echo", {"text": "über"})
            assert result.content[0].text == "über"  # type: ignore[union-attr]
        assert sid and version == "2025-11-25"
        first, *later = recorder.sent
        assert SESSION_HEADER not in first.headers and first.headers["x-team"] == "ops"
        for request in later:
            assert request.headers[SESSION_HEADER] == sid, request
            assert request.headers[VERSION_HEADER] == version
        assert [r.method for r in later][-1] == "DELETE"
        async with httpx2.AsyncClient() as other:  # the server has forgotten the session
            gone = await other.post(url, json={}, headers={SESSION_HEADER: sid, **ACCEPT})
        assert gone.status_code == 404


ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@FLAGS
async def test_tools_list_changed_arrives_on_the_calls_stream_or_the_get_stream(
    flags: tuple[str, ...],
) -> None:
    """The SDK's server sends it on the call's own SSE stream when it answers in SSE, and on
    the session's GET event stream when it answers in JSON: both are read."""
    port = free_port()
    recorder = Recorder()
    with serving(port, *flags):
        async with session_on(f"http://127.0.0.1:{port}/mcp", recorder) as session:
            await session.initialize()
            await until(lambda: session.listening)
            assert (await session.call_tool("grow", {})).content[0].text == "grown"  # type: ignore[union-attr]
            await until(lambda: recorder.changes >= 1)
            names = {t.name for t in (await session.list_tools()).tools}
    assert "late_tool" in names
    assert any(r.method == "GET" for r in recorder.sent)


async def test_the_event_stream_is_reopened_after_a_break_and_still_heard() -> None:
    """A GET stream that breaks (here a short read timeout on a quiet server) is opened again,
    and a later `tools/list_changed` (JSON answers: it comes on the GET stream) still arrives."""
    port = free_port()
    recorder = Recorder()
    url = f"http://127.0.0.1:{port}/mcp"
    with serving(port, "json"):
        timeout = httpx2.Timeout(30.0, read=1.0)
        async with (
            httpx2.AsyncClient(timeout=timeout, event_hooks={"request": [recorder.note]}) as client,
            McpHttpSession(url, client, recorder.changed, MAX_SSE_EVENT_BYTES) as session,
        ):
            await session.initialize()
            await until(lambda: [r.method for r in recorder.sent].count("GET") >= 2)
            deadline = time.monotonic() + 20
            while recorder.changes == 0:  # the stream is shut half the time here: ask again
                assert time.monotonic() < deadline
                await session.call_tool("grow", {})
                await asyncio.sleep(0.3)


async def test_a_call_given_up_is_cancelled_on_the_server(url: str) -> None:
    recorder = Recorder()
    async with session_on(url, recorder) as session:
        await session.initialize()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await session.call_tool("hang", {})
        await until(lambda: any(b"notifications/cancelled" in r.content for r in recorder.sent))
        assert (await session.call_tool("echo", {"text": "on"})).content[0].text == "on"  # type: ignore[union-attr]
    (call,) = [r for r in recorder.sent if b'"hang"' in r.content]
    (note,) = [r for r in recorder.sent if b"notifications/cancelled" in r.content]
    assert json.loads(note.content)["params"]["requestId"] == json.loads(call.content)["id"]


async def test_an_expired_session_is_renewed_and_the_call_goes_through(url: str) -> None:
    recorder = Recorder()
    async with session_on(url, recorder) as session:
        await session.initialize()
        old = session.session_id
        async with httpx2.AsyncClient() as other:  # the server ends it (as on its idle timeout)
            ended = await other.delete(url, headers={SESSION_HEADER: old, **ACCEPT})
        assert ended.status_code in (200, 204)
        result = await session.call_tool("echo", {"text": "again"})
        assert result.content[0].text == "again"  # type: ignore[union-attr]
        new = session.session_id
        assert new and new != old
        assert recorder.changes == 1  # the tools are listed again on the new session
    posts = [r for r in recorder.sent if r.method == "POST" and b"tools/call" in r.content]
    assert [p.headers[SESSION_HEADER] for p in posts] == [old, new]


@pytest.mark.parametrize("status", [429, 500])
async def test_an_http_error_status_is_a_tool_error_and_the_server_stays_up(status: int) -> None:
    port = free_port()
    config = McpServerConfig(name="f", url=f"http://127.0.0.1:{port}/mcp", timeout=20.0)
    with serving(port, "faults"):
        async with connected(config) as server:
            await until_up(server)
            with pytest.raises(ToolError, match=f"f__http_status failed: .*HTTP {status}"):
                await server.call(tool(server, "http_status"), {"status": status})
            assert server.state == "up" and server.restarts == 0 and server.tools
            assert await server.call(tool(server, "echo"), {"text": "fine"}) == "fine"


async def test_a_server_without_an_event_stream_is_asked_for_it_once() -> None:
    """A 405 on the GET means the server offers no stream: calls work, no retries follow."""
    port = free_port()
    recorder = Recorder()
    with serving(port, "faults"):
        async with session_on(f"http://127.0.0.1:{port}/mcp", recorder) as session:
            await session.initialize()
            await until(lambda: any(r.method == "GET" for r in recorder.sent))
            result = await session.call_tool("echo", {"text": "no stream"})
            assert result.content[0].text == "no stream"  # type: ignore[union-attr]
            await asyncio.sleep(1.5)  # past the first reconnect delay
            assert not session.listening
    assert [r.method for r in recorder.sent].count("GET") == 1


async def test_a_connection_dropped_mid_call_is_a_tool_error_then_a_reconnect() -> None:
    port = free_port()
    config = McpServerConfig(name="f", url=f"http://127.0.0.1:{port}/mcp", timeout=20.0)
    with serving(port, "faults"):
        async with connected(config) as server:
            await until_up(server)
            with pytest.raises(ToolError, match="being restarted"):
                await server.call(tool(server, "http_status"), {"status": 0})
            await until_up(server, restarts=1)  # the same server process, a new session
            assert await server.call(tool(server, "echo"), {"text": "back"}) == "back"


async def test_a_429_reaches_the_model_as_a_tool_result_and_the_turn_ends_well(
    config: Config, fake_llm: FakeOpenAIServer
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    config.mcp.servers = [McpServerConfig(name="f", url=url, chats=["*"], timeout=20.0)]
    fake_llm.add(calls(("f__http_status", {"status": 429}, "c1")), FakeReply("busy, later"))
    with serving(port, "faults"):
        async with running(config) as runtime:
            assert await ask(runtime, "try the tool") == "busy, later"
    result = tool_results(fake_llm.requests[1])["c1"]
    assert result.startswith("error: MCP server f: f__http_status failed"), result
    assert "HTTP 429 Too Many Requests" in result
