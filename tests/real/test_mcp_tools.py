"""A real model (SmolLM2 on `chatml-function-calling`) calls a real MCP server's tool end to
end: the server (`core.bench.fakes.mcp_server`) runs over stdio, its tools reach the model as
`t__<tool>`, and the call's result comes back in the history.

The runtime has the built-ins and the MCP plugin only: with the memory tools offered too, the
135M model often picks `write_memory` or `structured_memory_*` for every ask (its choice, not
the platform's), and the test proves nothing about MCP. The MCP path is the same either way.
Each ask has a chat of its own, so a failed ask's turns do not crowd the next one's window."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from core import plugin as default_plugin
from core.api import Inbound
from core.bench.fakes.llama_server import LlamaServer
from core.config import McpServerConfig
from core.mcp import plugin as mcp_plugin
from core.mcp.extension import McpExtension
from tests.real.conftest import RuntimeFactory

pytestmark = pytest.mark.real

REPO = Path(__file__).resolve().parents[2]
ASKS = (
    "Call the t__echo tool with the text hello.",
    "Use t__echo to repeat: hello",
    "Run the tool t__echo now, text = hello.",
)


async def test_a_real_model_calls_an_mcp_tool_over_stdio(
    tools_server: LlamaServer, real_runtime: RuntimeFactory
) -> None:
    server = McpServerConfig(
        name="t",
        command=sys.executable,
        args=["-m", "core.bench.fakes.mcp_server", "stdio"],
        env={"PYTHONPATH": str(REPO)},
        chats=["terminal:*"],
        timeout=20,  # the model may pick `t__hang`: a timeout is an answer too, only sooner
    )
    plugins = (default_plugin, mcp_plugin)
    # All nine tools offered, at the default tools budget: their cost in llama-cpp's
    # chatml-function-calling prompt (a preamble, the schemas, once per system message) is
    # learned from the answers, and a request is never planned over the window for them.
    async with real_runtime(tools_server, plugins, mcp={"servers": [server]}) as runtime:
        mcp = next(e for e in runtime.extensions if isinstance(e, McpExtension))
        services = [asyncio.create_task(s.run()) for s in runtime.extensions.services()]
        try:
            deadline = time.monotonic() + 60
            while mcp.servers[0].state != "up":
                assert time.monotonic() < deadline, mcp.servers[0].status()
                await asyncio.sleep(0.1)
            for index, text in enumerate(ASKS):
                # A chat per ask: an earlier ask's turns never fill the 2048-token window.
                chat_id = f"ask{index}"
                reply = await runtime.dispatcher(Inbound("terminal", chat_id, text))
                assert reply is not None and not reply.is_error, reply
                chat = runtime.store.get_or_create_chat("terminal", chat_id)
                stored = runtime.store.messages_between(chat.id, 0, 1000)
                if any(m.role == "tool" for m in stored):
                    break
        finally:
            for task in services:
                task.cancel()
            await asyncio.gather(*services, return_exceptions=True)
    names = {c["function"]["name"] for m in stored for c in (m.tool_calls or [])}
    results = [m.content for m in stored if m.role == "tool"]
    assert any(name.startswith("t__") for name in names), f"no MCP call: {names}"
    assert results and not all(r.startswith("error: no tool") for r in results), results
