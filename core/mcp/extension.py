"""The MCP extension of a running bot: the servers' tools per chat (who may use what), the
servers' background job, a note when one is down, `mnemo doctor` lines and `/tools`.

The servers start once the bot is quiet (no turn for `QUIET_S`), not with the bot: their
start imports the MCP SDK, about a second of CPU that shares the GIL (and, on a small
machine, the core) with the turn. A message that arrives at start is answered first, as
fast as with no server; its tools are absent, as a server's are until it is up.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from core.api import (
    Chat,
    Check,
    Command,
    ContextSection,
    Extension,
    Service,
    Tool,
    ToolSource,
    TurnContext,
)
from core.config import Config, McpServerConfig
from core.errors import ToolError
from core.mcp.connection import CONNECT_TIMEOUT_S, McpServer, McpTool
from core.tools.access import chat_matches
from core.tools.registry import ToolRegistry
from core.turn.activity import TurnActivity

logger = logging.getLogger(__name__)

DOCTOR_TIMEOUT_S = 10.0
QUIET_S = 0.3  # the servers start once no turn has run for this long
QUIET_AT_MOST_S = 10.0  # or after this long on a bot that is never quiet


def chat_allowed(server: McpServerConfig, control_chats: list[str], chat: Chat) -> bool:
    """Whether `chat` may use `server`: a key in its `chats` (`"*"`, `channel:*`, or exact),
    or, with no `chats` set, a control chat."""
    return chat_matches(server.chats or control_chats, chat, control_chats)


class McpTools(ToolSource):
    """The tools of every configured server, filtered by who may use them."""

    def __init__(self, config: Config, servers: list[McpServer]) -> None:
        self.config = config
        self.servers = servers
        memory = config.memory
        # The memory backend's server serves memory (`memory.mcp_backend`), not the model.
        self.memory_server = memory.mcp_server if memory.backend == "mcp" else ""

    def allowed(self, server: McpServer, chat: Chat) -> bool:
        if server.name == self.memory_server:
            return False
        return chat_allowed(server.config, self.config.agent.control_chats, chat)

    def tools_for(self, chat: Chat) -> list[Tool]:
        return [
            self._tool(server, tool)
            for server in self.servers
            if self.allowed(server, chat)
            for tool in server.tools
        ]

    def why_missing(self, chat: Chat, name: str) -> str:
        for server in self.servers:
            if not name.startswith(f"{server.name}__"):
                continue
            if not self.allowed(server, chat):
                return f"MCP server {server.name} is not open to this chat"
            if server.state != "up":
                return f"MCP server {server.name} is {server.status()}"
        return ""

    def _tool(self, server: McpServer, tool: McpTool) -> Tool:
        async def call(turn: TurnContext, args: dict[str, Any]) -> str:
            if not self.allowed(server, turn.chat):  # never, unless the set changed mid-turn
                raise ToolError(f"MCP server {server.name} is not open to this chat")
            return await server.call(tool, args)

        return Tool(tool.name, tool.description, call, tool.parameters)


class McpService:
    """Runs every server's connection loop until cancelled, from the bot's first lull."""

    name = "mcp"

    def __init__(self, servers: list[McpServer], activity: TurnActivity | None = None) -> None:
        self.servers = servers
        self.activity = activity or TurnActivity()
        self.started = False
        self.connecting = False  # past the wait for a lull: the servers are being started

    async def run(self) -> None:
        self.started = True
        if not await self.activity.quiet(QUIET_S, QUIET_AT_MOST_S):
            logger.info("MCP servers start now: the bot has been busy for %.0f s", QUIET_AT_MOST_S)
        self.connecting = True
        async with asyncio.TaskGroup() as group:
            for server in self.servers:
                group.create_task(server.run(), name=f"mcp {server.name}")


class McpExtension(Extension):
    """MCP servers as tools that come and go, per chat."""

    name = "mcp"

    def __init__(
        self, config: Config, registry: ToolRegistry, activity: TurnActivity | None = None
    ) -> None:
        limit, logs = config.mcp.max_restart_delay, config.storage.data_dir / "logs"
        self.servers = [McpServer(server, limit, logs) for server in config.mcp.servers]
        self.source = McpTools(config, self.servers)
        self.service = McpService(self.servers, activity)
        self.registry = registry

    def tool_sources(self) -> list[ToolSource]:
        return [self.source]

    def services(self) -> list[Service]:
        return [self.service] if self.servers else []

    def commands(self) -> list[Command]:
        return [Command("tools", "the tools this chat can use", self._tools_command)]

    async def _tools_command(self, turn: TurnContext, args: str) -> str:
        return tools_report(self.registry, self.source, turn.chat)

    async def context_sections(self, turn: TurnContext) -> list[ContextSection]:
        down = [
            f"MCP server {server.name} is {server.status()}; its tools are unavailable "
            "until it is up."
            for server in self.servers
            if server.state != "up" and self.source.allowed(server, turn.chat)
        ]
        if not down:
            return []
        return [ContextSection("mcp", "mcp", "\n".join(down), priority=20)]

    async def checks(self) -> list[Check]:
        """One line per server: its tools, or its last error. Outside a running bot (plain
        `mnemo doctor`) each server is connected once to list its tools."""
        if not self.service.started:
            await asyncio.gather(*(probe(server) for server in self.servers))
        return [server_check(server) for server in self.servers]


def server_check(server: McpServer) -> Check:
    where = server.config.url or server.config.command
    if server.state == "up":
        detail = f"{len(server.tools)} tools ({where})"
        return Check(f"mcp {server.name}", True, detail)
    detail = f"{server.status()} ({where})"
    # Not fatal: the bot works without it; its tools are simply missing.
    return Check(f"mcp {server.name}", False, detail, fatal=False)


async def probe(server: McpServer) -> None:
    """Connect once, list the tools, disconnect (for `mnemo doctor`)."""
    try:
        async with asyncio.timeout(min(DOCTOR_TIMEOUT_S, CONNECT_TIMEOUT_S)):
            async with server.connect() as session:
                await session.initialize()
                await server.list_tools(session)
        server.state = "up"
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # noqa: BLE001 - anyio groups wrap the cause
        server._down(server.explain(exc) if not isinstance(exc, TimeoutError) else "timed out")


def tools_report(registry: ToolRegistry, source: McpTools, chat: Chat) -> str:
    """What `/tools` shows: the tools this chat can call, then the servers it cannot use."""
    mcp_names = {tool.name for server in source.servers for tool in server.tools}
    usable = registry.tools_for(chat)
    builtin = [tool.name for tool in usable if tool.name not in mcp_names]
    lines = [f"Built-in tools: {', '.join(builtin) or 'none'}"]
    for server in source.servers:
        if server.name == source.memory_server:
            lines.append(f"MCP {server.name}: the memory backend ({server.status()}), not a tool")
        elif not source.allowed(server, chat):
            lines.append(f"MCP {server.name}: refused in this chat")
        elif server.state != "up":
            lines.append(f"MCP {server.name}: {server.status()}")
        else:
            names = ", ".join(tool.name for tool in server.tools) or "no tools"
            lines.append(f"MCP {server.name}: {names}")
    return "\n".join(lines)
