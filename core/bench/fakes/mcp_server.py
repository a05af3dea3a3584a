"""A small real MCP server for tests and benchmarks, on the SDK's own `MCPServer`.

Run it as `python -m core.bench.fakes.mcp_server stdio` or `... http PORT [json] [faults]`
(streamable HTTP on 127.0.0.1:PORT/mcp; each answer an SSE stream, the SDK's default, or with
`json` one JSON body, the SDK's advice for production). A bearer token in `MNEMO_TEST_MCP_TOKEN`
makes the HTTP server refuse requests without it (401). With `faults`, a call of its extra tool
`http_status` is answered with that HTTP status (429, 500 …), or with 0 the connection drops
after the response has started, the server still up; and a GET is answered 405, as by a
server that offers no event stream. Its tools cover what the client must
survive: a plain call, a slow call, a hang, a crash mid-call, a 10 MB result, a schema with
`$ref`s and formats a strict model server rejects, and a tool that appears at run time
(`tools/list_changed`).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

server = MCPServer("mnemo-test")


class Place(BaseModel):
    """Where: a page and a pointer into it."""

    url: str = Field(json_schema_extra={"format": "uri"})
    line: int = 0


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
async def work(ms: int) -> str:
    """Sleep `ms` milliseconds (the tool's own work), then say when it started and ended."""
    started = time.monotonic()
    await asyncio.sleep(ms / 1000)
    return f"{started:.6f} {time.monotonic():.6f}"


@server.tool()
async def hang() -> str:
    """Never return."""
    await asyncio.sleep(3600)
    return "late"


@server.tool()
def crash() -> str:
    """Kill the server process mid-call."""
    os._exit(3)


@server.tool()
def big(chars: int) -> str:
    """A result of `chars` characters."""
    return "x" * (chars - 3) + "end"


@server.tool()
def open_page(place: Place, note: str | None = None) -> str:
    """A tool whose schema carries a `$ref` into `$defs` and a `format: uri`."""
    return f"opened {place.url} at line {place.line}{' ' + note if note else ''}"


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `late_tool` and tell the client the tool list changed."""
    if "late_tool" not in {tool.name for tool in await server.list_tools()}:
        server.add_tool(lambda: "late result", name="late_tool", description="Added late.")
    await ctx.session.send_tool_list_changed()
    return "grown"


def http_status(status: int) -> str:
    """Answer with HTTP `status` (0: drop the connection); listed with `faults` only, whose
    wrapper answers its calls before they reach it."""
    return f"no fault: {status}"


def run_http(port: int, json_response: bool, faults: bool = False) -> None:
    """Serve on 127.0.0.1:`port`, quietly (a log line per call would be part of the timing)."""
    import uvicorn

    server.settings.log_level = "WARNING"
    app = server.streamable_http_app(json_response=json_response)
    if faults:
        server.add_tool(http_status)
        app = with_faults(app)
    token = os.environ.get("MNEMO_TEST_MCP_TOKEN", "")
    uvicorn.run(bearer_only(app, token) if token else app, host="127.0.0.1", port=port,
                log_level="warning", access_log=False)  # fmt: skip


def bearer_only(app: Any, token: str) -> Any:
    """`app` behind a check of `Authorization: Bearer <token>`."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"bearer token required"})
            return
        await app(scope, receive, send)

    return guarded


def with_faults(app: Any) -> Any:
    """`app` where a POST calling `http_status` is answered with that status (0: dropped) and
    a GET with 405."""

    async def faulty(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            await send({"type": "http.response.start", "status": 405, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        status = fault_status(body)
        if status is None:
            replayed = iter([{"type": "http.request", "body": body, "more_body": False}])
            await app(scope, lambda: _next_or(replayed, receive), send)
            return
        headers = [(b"content-type", b"text/event-stream" if status == 0 else b"text/plain")]
        await send({"type": "http.response.start", "status": status or 200, "headers": headers})
        if status == 0:
            await send({"type": "http.response.body", "body": b"data: {", "more_body": True})
            raise ConnectionAbortedError("dropped on purpose")
        await send({"type": "http.response.body", "body": f"fault {status}".encode()})

    return faulty


async def _next_or(replayed: Any, receive: Any) -> Any:
    return next(replayed, None) or await receive()


def fault_status(body: bytes) -> int | None:
    """The status asked by a `tools/call` of `http_status` in `body` (None: another message)."""
    import json

    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return None
    params = message.get("params")
    if not isinstance(params, dict) or params.get("name") != "http_status":
        return None
    return int((params.get("arguments") or {}).get("status", 500))


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "http":
        flags = sys.argv[3:]
        run_http(int(sys.argv[2]), json_response="json" in flags, faults="faults" in flags)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
