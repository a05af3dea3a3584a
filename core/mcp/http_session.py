"""Mnemo's own client of a streamable-HTTP MCP server: the JSON-RPC exchanges the connection
uses (initialize, tools/list, tools/call, ping) as plain POSTs on one kept-alive httpx2 client,
and the server's GET event stream for `notifications/tools/list_changed`. Stdio servers stay on
the SDK's `ClientSession`.

Why not the SDK's transport: its client path (memory streams, a task per POST, the session's
dispatcher) costs about as much per call as the server and HTTP together, so an HTTP call took
twice a bare POST. Here a call is one POST whose answer is read in the caller's task, either one
JSON body or an SSE stream (notifications before the response are handled on the way), read to
its end so the connection is reused. Results are validated with the SDK's own types.

Wire rules (MCP 2025-11-25, streamable HTTP): the server's `Mcp-Session-Id` from `initialize` and
the negotiated `MCP-Protocol-Version` go on every later request; a 404 with a session means the
session expired: one new `initialize`, then the request once more; a GET answered 405 means the
server offers no event stream; a request given up (the call's timeout) is followed by
`notifications/cancelled`, so the server stops its work; the session is DELETEd on close. An
HTTP error status is a `McpRefused` (the server is up but said no: a tool error, no restart); a
broken connection is an httpx2 error (the server went away: the connection layer restarts it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
from mcp.types import (
    CallToolResult,
    InitializeResult,
    ListToolsResult,
    PaginatedRequestParams,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

from core.errors import ToolError

logger = logging.getLogger(__name__)

TIMEOUT_S = 30.0  # connect, write, pool (the SDK's default)
READ_TIMEOUT_S = 300.0  # between two bytes of an answer or of the event stream (the SDK's)
DRAIN_S = 0.05  # how long a POST's event stream may take to end after its response
DELETE_TIMEOUT_S = 2.0  # closing never waits long on a server that is gone
LISTEN_RETRY_S = (1.0, 30.0)  # the event stream's reconnect delay: first, at most
CLIENT_INFO = {"name": "mnemo", "version": "1"}
SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"
METHOD_NOT_FOUND = -32601


class McpRefused(ToolError):
    """The server answered with an HTTP error status or a JSON-RPC error: it is up, it said no."""


class SessionExpired(McpRefused):
    """The server no longer knows the session (HTTP 404): initialize again."""


def http_client(headers: dict[str, str]) -> httpx2.AsyncClient:
    """One client per server: its headers (auth), the SDK's timeouts, no redirects followed."""
    return httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(TIMEOUT_S, read=READ_TIMEOUT_S),
        follow_redirects=False,
    )


async def error_text(response: httpx2.Response, most: int = 2048) -> str:
    """What an error answer says, briefly: its JSON-RPC error message, or its text."""
    body = b""
    async for part in response.aiter_bytes():
        body += part
        if len(body) >= most:
            break
    text = body[:most].decode("utf-8", "replace").strip()
    with contextlib.suppress(ValueError, AttributeError):
        error = json.loads(text).get("error")
        text = str(error.get("message", error) if isinstance(error, dict) else error or text)
    return " ".join(text.split())[:200]


class McpHttpSession:
    """One MCP session with a streamable-HTTP server, on `client` (closed by the caller).
    `on_tools_changed` runs when the server says its tool list changed, or after a new
    session (the tools may differ)."""

    def __init__(
        self,
        url: str,
        client: httpx2.AsyncClient,
        on_tools_changed: Callable[[], None],
        max_event_bytes: int,
    ) -> None:
        self.url = url
        self.client = client
        self.on_tools_changed = on_tools_changed
        self.max_event_bytes = max_event_bytes
        self.session_id = ""
        self.version = ""
        self.listening = False  # the GET event stream is open
        self._ids = itertools.count(1)
        self._renew = asyncio.Lock()
        self._listener: asyncio.Task[None] | None = None
        self._notes: set[asyncio.Task[None]] = set()  # cancellations on their way

    async def __aenter__(self) -> McpHttpSession:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop listening and end the session on the server (DELETE), best effort."""
        await self._stop_listening()
        await asyncio.gather(*self._notes, return_exceptions=True)
        if not self.session_id:
            return
        with contextlib.suppress(httpx2.HTTPError, TimeoutError):
            async with asyncio.timeout(DELETE_TIMEOUT_S):
                await self.client.delete(self.url, headers=self._headers())
        self.session_id = ""

    async def initialize(self) -> InitializeResult:
        """A new session: `initialize`, the version check, `notifications/initialized`, and
        the server's event stream."""
        await self._stop_listening()
        self.session_id = self.version = ""
        params = {
            "protocolVersion": LATEST_HANDSHAKE_VERSION,
            "capabilities": {},
            "clientInfo": CLIENT_INFO,
        }
        result = InitializeResult.model_validate(
            await self._request("initialize", params), by_name=False
        )
        if result.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            raise McpRefused(f"the server speaks MCP {result.protocol_version}, not one we know")
        self.version = result.protocol_version
        await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self._listener = asyncio.create_task(self._listen(), name=f"mcp-listen {self.url}")
        return result

    async def list_tools(self, *, params: PaginatedRequestParams | None = None) -> ListToolsResult:
        sent = params.model_dump(by_alias=True, exclude_none=True) if params else {}
        return ListToolsResult.model_validate(await self.request("tools/list", sent), by_name=False)

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
        result = await self.request("tools/call", {"name": name, "arguments": arguments or {}})
        return CallToolResult.model_validate(result, by_name=False)

    async def send_ping(self) -> None:
        await self.request("ping", {})

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The result of one request; an expired session is renewed once, then asked again."""
        session = self.session_id
        try:
            return await self._request(method, params)
        except SessionExpired:
            logger.info("MCP session at %s expired; starting a new one", self.url)
        async with self._renew:
            if self.session_id == session:  # not renewed by a concurrent call meanwhile
                try:
                    await self.initialize()
                except McpRefused as exc:  # no session now: not a refusal, the link is gone
                    raise ConnectionError(f"no new session after an expiry: {exc}") from exc
                self.on_tools_changed()
        return await self._request(method, params)

    async def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        ident = next(self._ids)
        message = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
        try:
            answer = await self._post(message)
        except asyncio.CancelledError:
            self._tell_cancelled(ident)
            raise
        if answer is None:
            raise McpRefused(f"the server sent no answer to {method}")
        error = answer.get("error")
        if error is not None:
            text = error.get("message", error) if isinstance(error, dict) else error
            raise McpRefused(f"the server refused {method}: {text}")
        result = answer.get("result")
        if not isinstance(result, dict):
            raise McpRefused(f"the server's answer to {method} has no result")
        return result

    def _tell_cancelled(self, ident: int) -> None:
        """Tell the server a request was given up, in the background (the caller is being
        cancelled): a hung tool would otherwise go on working for nobody."""
        params = {"requestId": ident, "reason": "the client gave up (timeout)"}
        note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
        task = asyncio.create_task(self._post_quietly(note))
        self._notes.add(task)
        task.add_done_callback(self._notes.discard)

    async def _post_quietly(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(httpx2.HTTPError, McpRefused, TimeoutError):
            async with asyncio.timeout(DELETE_TIMEOUT_S):
                await self._post(message)

    async def _post(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """POST one message; the JSON-RPC response to it (None for a notification)."""
        body = json.dumps(message, ensure_ascii=False).encode()
        request = self.client.build_request("POST", self.url, content=body, headers=self._headers())
        response = await self.client.send(request, stream=True)
        try:
            await self._check_status(response, message)
            if message.get("method") == "initialize":
                self.session_id = response.headers.get(SESSION_HEADER, "")
            if "id" not in message:
                return None  # a notification: 202, nothing to read
            kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
            if kind == "application/json":
                return self._response_in(json.loads(await response.aread()), message["id"])
            if kind == "text/event-stream":
                return await self._read_events(response, message["id"])
            raise McpRefused(f"the server answered {kind or 'no content type'}, not JSON or SSE")
        finally:
            await response.aclose()

    async def _check_status(self, response: httpx2.Response, message: dict[str, Any]) -> None:
        status = response.status_code
        if status < 300:
            return
        if status == 404 and self.session_id and message.get("method") != "initialize":
            raise SessionExpired(f"HTTP 404: the server ended session {self.session_id}")
        said = f"HTTP {status} {response.reason_phrase}".strip()
        if status in (401, 403):
            said += " (check headers and bearer_token_env)"
        if 300 <= status < 400:
            where = response.headers.get("location", "")
            said += f": redirect to {where} not followed; use that URL as the endpoint"
        elif why := await error_text(response):
            said += f": {why}"
        raise McpRefused(f"the server answered {said}")

    def _response_in(self, answer: object, ident: int) -> dict[str, Any]:
        if isinstance(answer, dict) and answer.get("id") == ident:
            return answer
        raise McpRefused("the server's JSON answer is not the response to the request")

    async def _read_events(self, response: httpx2.Response, ident: int) -> dict[str, Any]:
        """The response in a POST's event stream (notifications and server requests before it
        are handled), then the rest of the stream read so the connection stays open."""
        events = aiter(httpx2.EventSource(response, max_event_size=self.max_event_bytes))
        async for event in events:
            message = self._parsed(event.data)
            if message is None:
                continue
            if message.get("id") == ident and "method" not in message:
                await self._drain(events)
                return message
            await self._on_server_message(message)
        raise McpRefused("the server's event stream ended without a response")

    async def _drain(self, events: AsyncIterator[object]) -> None:
        """Read the stream's short remainder (the server ends it after the response); one that
        goes on is closed instead, and httpx drops its connection."""
        with contextlib.suppress(TimeoutError, httpx2.HTTPError):
            async with asyncio.timeout(DRAIN_S):
                async for _ in events:
                    pass

    def _parsed(self, data: str) -> dict[str, Any] | None:
        if not data.strip():
            return None  # a priming event (an id for resumption, no message)
        try:
            message = json.loads(data)
        except json.JSONDecodeError:
            logger.warning("MCP server at %s sent an event that is not JSON", self.url)
            return None
        return message if isinstance(message, dict) else None

    async def _on_server_message(self, message: dict[str, Any]) -> None:
        """A notification or a request from the server, on a call's stream or the GET one."""
        method = message.get("method")
        if method == "notifications/tools/list_changed":
            self.on_tools_changed()
        elif "id" in message and isinstance(method, str):
            await self._answer(message["id"], method)
        else:
            logger.debug("MCP server at %s: %s", self.url, method)

    async def _answer(self, ident: object, method: str) -> None:
        """Answer a server's request: a ping, or "method not found" (no sampling, no roots)."""
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": ident}
        if method == "ping":
            reply["result"] = {}
        else:
            reply["error"] = {"code": METHOD_NOT_FOUND, "message": f"{method} not supported"}
        await self._post_quietly(reply)

    def _headers(self, accept: str = "application/json, text/event-stream") -> dict[str, str]:
        headers = {"accept": accept, "content-type": "application/json"}
        if self.session_id:
            headers[SESSION_HEADER] = self.session_id
        if self.version:
            headers[VERSION_HEADER] = self.version
        return headers

    async def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
        self.listening = False

    async def _listen(self) -> None:
        """The server's GET event stream, for as long as the session lasts: reopened after a
        break (1 s, 2 s … 30 s), given up on a 405 (no stream) or an ended session."""
        delay = LISTEN_RETRY_S[0]
        while True:
            try:
                if not await self._listen_once():
                    return
                delay = LISTEN_RETRY_S[0]  # it was open: a clean end, reopen soon
            except (httpx2.HTTPError, McpRefused) as exc:
                logger.debug("MCP event stream at %s broke: %s", self.url, exc)
                if self.listening:  # it was open (a quiet server's read timeout): reopen soon
                    delay = LISTEN_RETRY_S[0]
            self.listening = False
            await asyncio.sleep(delay)
            delay = min(delay * 2, LISTEN_RETRY_S[1])

    async def _listen_once(self) -> bool:
        """One GET stream until it ends; False when reopening it is pointless."""
        headers = self._headers("text/event-stream")
        async with self.client.stream("GET", self.url, headers=headers) as response:
            if response.status_code == 405:
                logger.debug("MCP server at %s offers no event stream", self.url)
                return False
            if response.status_code == 404 and self.session_id:
                return False  # the next request renews the session, and its stream
            if response.status_code >= 300:
                raise McpRefused(f"HTTP {response.status_code} on the event stream")
            self.listening = True
            async for event in httpx2.EventSource(response, max_event_size=self.max_event_bytes):
                message = self._parsed(event.data)
                if message is not None:
                    await self._on_server_message(message)
        return True
