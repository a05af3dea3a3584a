"""A small MCP memory server for tests, on the SDK's own `MCPServer`, speaking the
`memory_query` + `memory_upsert` tools of `memory.mcp_backend`.

Run as `python -m tests.fakes.mcp_memory_server` (stdio). Its order is its own: its seeded
row first, then the chat's rows newest first, so a test can tell it from the database's
ranking. A query containing "crash" kills the process mid-call. Each upsert is appended
as a JSON line to the file `MEMORY_LOG` names, for the test to read.
"""

from __future__ import annotations

import json
import os
from typing import Any

from mcp.server.mcpserver import MCPServer

server = MCPServer("mnemo-test-memory")
SEED = {"content": "The user's favourite colour is teal (server row)", "category": "PROFILE"}
rows: list[dict[str, Any]] = []


@server.tool()
def memory_query(query: str, chat: str, k: int = 5) -> str:
    """The chat's memories for `query`, in this server's order."""
    if "crash" in query:
        os._exit(4)
    mine = [row for row in reversed(rows) if row["chat"] == chat]
    return json.dumps({"memories": [SEED, *mine][:k]})


@server.tool()
def memory_upsert(chat: str, id: str, content: str, category: str = "KNOWLEDGE") -> str:
    """Store or replace the memory `id` of `chat`."""
    row = {"chat": chat, "id": id, "content": content, "category": category}
    rows[:] = [old for old in rows if (old["chat"], old["id"]) != (chat, id)] + [row]
    log = os.environ.get("MEMORY_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")
    return "ok"


if __name__ == "__main__":
    server.run("stdio")
