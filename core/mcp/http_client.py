"""The HTTP client of a streamable-HTTP MCP server: one keep-alive connection pool per server,
kept warm even when the server answers each call as a short SSE stream.

The SDK's transport stops reading a call's SSE response as soon as the JSON-RPC response event
arrives and closes it; the end of the chunked body is still unread, so httpcore drops the
connection and the next call opens a new TCP connection (a connect and a close on both sides,
about a sixth of the CPU a call costs on 127.0.0.1). Here a POST's event stream, when closed,
first reads what is left of it for a few milliseconds (the server ends it right after the
response), so the connection goes back to the pool. The drain runs after the response reached
the caller, so it never delays a call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx2

DRAIN_S = 0.05  # how long a closed POST stream may take to end before the connection goes
DRAIN_MAX_BYTES = 64 * 1024  # more than this left unread: not an ending, drop the connection


class DrainOnClose(httpx2.AsyncByteStream):
    """A response body whose close reads its short remainder, to keep the connection."""

    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner
        # One iterator over the body for the whole response: a reader that stops early
        # abandons only its own generator, not the connection's.
        self._parts: AsyncIterator[bytes] | None = None
        self._ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._parts is None:
            self._parts = aiter(self._inner)
        while not self._ended:
            try:
                part = await anext(self._parts)
            except StopAsyncIteration:
                self._ended = True
                return
            yield part

    async def aclose(self) -> None:
        try:
            if self._parts is not None and not self._ended:
                await self._drain(self._parts)
        finally:
            if self._parts is not None and hasattr(self._parts, "aclose"):
                await self._parts.aclose()
            await self._inner.aclose()

    async def _drain(self, parts: AsyncIterator[bytes]) -> None:
        left = DRAIN_MAX_BYTES
        with anyio.move_on_after(DRAIN_S):
            try:
                while left > 0:
                    left -= len(await anext(parts))
            except StopAsyncIteration:
                self._ended = True
            except httpx2.TransportError:
                pass  # the connection broke: httpcore has dropped it already


class KeepAliveTransport(httpx2.AsyncBaseTransport):
    """httpx2's own transport, with POST event streams drained on close (see module doc).
    It keeps the last response's HTTP error status, which the SDK reports only as "an error
    response"."""

    def __init__(self) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self.last_refusal = ""  # the last response's error status, e.g. "HTTP 401 Unauthorized"

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        refused = response.status_code >= 400
        self.last_refusal = (
            f"HTTP {response.status_code} {response.reason_phrase}" if refused else ""
        )
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if request.method != "POST" or kind != "text/event-stream":
            return response
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = DrainOnClose(response.stream)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def keep_alive_client(
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
    transport: KeepAliveTransport | None = None,
) -> httpx2.AsyncClient:
    """The SDK's client (`create_mcp_http_client`: its timeouts, no redirects followed) on
    `transport` (a new `KeepAliveTransport` by default)."""
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    return httpx2.AsyncClient(
        headers=headers,
        timeout=timeout or httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        auth=auth,
        transport=transport or KeepAliveTransport(),
    )
