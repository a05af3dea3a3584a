"""One MCP server: its connection (stdio on the SDK's `ClientSession`, streamable HTTP on
Mnemo's own `McpHttpSession`), kept up with restarts and backoff, its current tools, and
calling one with a timeout.

`run()` is the server's background job: it connects, lists the tools, lists them again on
`tools/list_changed`, pings while idle, and reconnects after a crash (1 s, 2 s, 4 s … up
to `[mcp] max_restart_delay`). While it is down `tools` is empty and `last_error` says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from core.config import McpServerConfig
from core.errors import ToolError
from core.mcp.schema import clean_schema, model_tool_name

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import CallToolResult

    from core.mcp.http_session import McpHttpSession

    Session = ClientSession | McpHttpSession

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 20.0
PING_EVERY_S = 15.0
FIRST_RESTART_DELAY_S = 1.0
MAX_LOG_BYTES = 1024 * 1024  # a stdio server's stderr file starts over past this
MAX_SSE_EVENT_BYTES = 64 * 1024 * 1024  # a big tool result over HTTP is one SSE event
STDIO_NICENESS = 10  # stdio servers start below the bot's CPU priority: replies come first


def niced_command(command: str, args: list[str], path: str | None) -> tuple[str, list[str]]:
    """The command line that starts a stdio server at `STDIO_NICENESS`, through POSIX `nice`,
    so that on a small machine a server starting (or busy) never slows a reply. Unchanged
    where there is no `nice` or the command does not resolve (its own error stays clear)."""
    nice = shutil.which("nice")
    program = shutil.which(command, path=path)
    if nice is None or program is None:
        return command, args
    return nice, ["-n", str(STDIO_NICENESS), program, *args]


@dataclass(frozen=True)
class McpTool:
    """One tool of a server as the model sees it (`<server>__<tool>`)."""

    name: str  # the model's name
    remote_name: str  # the server's name
    description: str
    parameters: dict[str, Any]


class McpServer:
    """A configured server, its state and its tools; `run()` keeps it connected."""

    def __init__(
        self, config: McpServerConfig, max_restart_delay: float = 60.0, log_dir: Path | None = None
    ) -> None:
        self.config = config
        self.max_restart_delay = max_restart_delay
        # A stdio server's stderr: a file here (None: this process's stderr), so its logs
        # never cover the terminal chat, and its last line explains a crash.
        self.log_path = log_dir / f"mcp-{config.name}.log" if log_dir else None
        self.tools: list[McpTool] = []
        self.state = "starting"  # "starting", "up", "down"
        self.last_error = ""
        self.restarts = 0
        self._session: Session | None = None
        self._wake = asyncio.Event()  # a crash seen by a call, or tools/list_changed
        self._relist = False
        self._broken = False
        self._served = False

    @property
    def name(self) -> str:
        return self.config.name

    def status(self) -> str:
        """`up`, `starting` or `down (why)`, for the model, `/tools` and `mnemo doctor`."""
        if self.state != "down":
            return self.state
        said = self.last_log_line()
        why = self.last_error or "not connected"
        return f"down ({why}; it said: {said})" if said else f"down ({why})"

    async def run(self) -> None:
        """Connect, serve, and reconnect with exponential backoff until cancelled."""
        delay = FIRST_RESTART_DELAY_S
        while True:
            self._served = self._broken = False
            try:
                await self._serve_once()
                error = "the connection closed"
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - anyio groups wrap the cause
                error = self.explain(exc)
            if self._broken:
                error = self.last_error  # what the failed call saw
            if self._served:
                delay = FIRST_RESTART_DELAY_S
            self._down(error)
            logger.warning("MCP server %s is down (%s); restarting in %.0f s",
                           self.name, error, delay)  # fmt: skip
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.max_restart_delay)
            self.restarts += 1

    def _down(self, error: str) -> None:
        self.state = "down"
        self.last_error = error
        self.tools = []
        self._session = None

    async def _serve_once(self) -> None:
        await load_sdk()
        async with self.connect() as session:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                await session.initialize()
                await self.list_tools(session)
            self._session, self.state, self._broken = session, "up", False
            self._served = True
            logger.info("MCP server %s is up with %d tools", self.name, len(self.tools))
            while not self._broken:
                await self._idle(session)

    async def _idle(self, session: Session) -> None:
        """Wait for a wake-up or the ping interval; relist or ping as needed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), PING_EVERY_S)
        self._wake.clear()
        if self._broken:
            return
        async with asyncio.timeout(self.config.timeout):
            if self._relist:
                self._relist = False
                await self.list_tools(session)
            else:
                await session.send_ping()

    async def list_tools(self, session: Session) -> None:
        """Read every page of the server's tools into `tools`, named and cleaned."""
        listed = []
        cursor: str | None = None
        while True:
            from mcp.types import PaginatedRequestParams

            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = sorted(
            (
                McpTool(
                    model_tool_name(self.name, tool.name),
                    tool.name,
                    (tool.description or tool.title or tool.name).strip()[:1024],
                    clean_schema(tool.input_schema),
                )
                for tool in listed
            ),
            key=lambda tool: tool.name,
        )

    @contextlib.asynccontextmanager
    async def connect(self) -> AsyncIterator[Session]:
        if self.config.url:
            from core.mcp.http_session import McpHttpSession, http_client

            url, most = self.config.url, MAX_SSE_EVENT_BYTES
            async with (
                http_client(self.headers()) as client,
                McpHttpSession(url, client, self._tools_changed, most) as session,
            ):
                yield session
            return
        from mcp import ClientSession

        async with (
            self._stdio() as (read, write),
            ClientSession(read, write, message_handler=self._on_message) as stdio_session,
        ):
            yield stdio_session

    @contextlib.asynccontextmanager
    async def _stdio(self) -> AsyncIterator[Any]:
        from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client

        env = {**get_default_environment(), **self.config.env}
        command, args = niced_command(self.config.command, self.config.args, env.get("PATH"))
        params = StdioServerParameters(command=command, args=args, env=env)
        with self._errlog() as errlog:
            async with stdio_client(params, errlog=errlog) as streams:
                yield streams

    @contextlib.contextmanager
    def _errlog(self) -> Iterator[TextIO]:
        if self.log_path is None:
            yield sys.stderr
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        big = self.log_path.exists() and self.log_path.stat().st_size > MAX_LOG_BYTES
        with self.log_path.open("w" if big else "a", encoding="utf-8") as log:  # start over
            yield log

    def last_log_line(self) -> str:
        """The last line the stdio server wrote to stderr ("" when none or no log file)."""
        if self.log_path is None:
            return ""
        try:
            with self.log_path.open("rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - 4096))
                lines = log.read().decode("utf-8", "replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1].strip()[:200] if lines else ""

    def explain(self, exc: BaseException) -> str:
        """Why a connection or call failed (an HTTP server's refusals name their status)."""
        return describe(exc)

    def headers(self) -> dict[str, str]:
        """The configured headers, with `Authorization: Bearer` from `bearer_token_env`."""
        headers = dict(self.config.headers)
        if self.config.bearer_token_env:
            token = os.environ.get(self.config.bearer_token_env, "")
            if not token:
                raise ToolError(f"{self.config.bearer_token_env} is not set")
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def _on_message(self, message: object) -> None:
        from mcp.types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            self._tools_changed()
        elif isinstance(message, Exception):
            logger.warning("MCP server %s: transport error: %s", self.name, message)

    def _tools_changed(self) -> None:
        """The server's tools changed (`tools/list_changed`, a new HTTP session): relist."""
        self._relist = True
        self._wake.set()

    async def call(self, tool: McpTool, args: dict[str, Any]) -> str:
        """The tool's result as text; a failure raises `ToolError` with a reason the model
        can read (a crash also wakes `run()` to restart the server)."""
        session = self._session
        if session is None or self.state != "up":
            raise ToolError(f"MCP server {self.name} is {self.status()}")
        try:
            async with asyncio.timeout(self.config.timeout):
                result = await session.call_tool(tool.remote_name, args)
        except TimeoutError as exc:
            raise ToolError(
                f"{tool.name} timed out after {self.config.timeout:g} s (MCP server {self.name})"
            ) from exc
        except ToolError as exc:  # the server is up and refused (HTTP 429, 500, …): no restart
            raise ToolError(f"MCP server {self.name}: {tool.name} failed: {exc}") from exc
        except Exception as exc:
            reason = f"failed during {tool.name}: {self.explain(exc)}"
            if session is self._session:
                self._down(reason)  # its tools go at once; `run()` restarts it
                self._broken = True
                self._wake.set()
            raise ToolError(f"MCP server {self.name} {reason}; it is being restarted") from exc
        return result_text(result)


SDK_MODULES = ("mcp", "mcp.types", "mcp.client.stdio", "core.mcp.http_session")


async def load_sdk() -> None:
    """Import the MCP SDK in a thread: it takes about a second of CPU, which on the event
    loop would hold up the turn that starts while the servers come up (the first reply)."""
    if not all(name in sys.modules for name in SDK_MODULES):
        await asyncio.to_thread(lambda: [importlib.import_module(name) for name in SDK_MODULES])


def result_text(result: CallToolResult) -> str:
    """A call's content as text (images and other blobs named, not inlined)."""
    parts: list[str] = []
    for item in result.content:
        text = getattr(item, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            kind = getattr(item, "type", "content")
            mime = getattr(item, "mime_type", "") or ""
            parts.append(f"[{kind} {mime}]".replace(" ]", "]"))
    if not parts and result.structured_content is not None:
        import json

        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts) or "(no content)"
    if result.is_error:
        raise ToolError(text)
    return text


def describe(exc: BaseException) -> str:
    """The innermost message of an error (anyio wraps crashes in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip() or type(exc).__name__
    return text[:300]
