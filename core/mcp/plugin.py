"""The MCP plugin: `mnemo bench tools`, and the extension that brings the configured MCP
servers' tools to a bot (`mnemo doctor` shows the servers through its checks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import click

    from core.api import Extension
    from core.turn.hooks import Host

# Short help for `mnemo bench --help`, which lists the benches without importing them.
BENCH_HELP = "The overhead of one MCP call (stdio, streamable HTTP) and chat start-up with servers."


def register_commands(cli: click.Group) -> None:
    from core.cli.lazy_group import add_lazy_command
    from core.cli.runtime import bench_group

    add_lazy_command(bench_group(cli), "tools", "core.mcp.bench:bench_tools", BENCH_HELP)


def extension(host: Host) -> Extension:
    from core.mcp.extension import McpExtension

    return McpExtension(host.config, host.extensions.tools, host.activity)
