"""The MCP plugin: the extension that brings configured MCP servers' tools to a bot."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.api import Extension

if TYPE_CHECKING:
    import click

    from core.hooks import Host


def register_commands(cli: click.Group) -> None:
    """`mnemo bench tools`; `mnemo doctor` shows the servers through the extension's checks."""
    from core.cli import bench_group
    from core.mcp.bench import bench_tools

    bench_group(cli).add_command(bench_tools)


def extension(host: Host) -> Extension | None:
    from core.mcp.extension import McpExtension

    return McpExtension(host.config, host.extensions.tools)
