"""The MCP plugin: the extension that brings configured MCP servers' tools to a bot."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.api import Extension

if TYPE_CHECKING:
    import click

    from core.hooks import Host


def register_commands(cli: click.Group) -> None:
    """No commands of its own: `mnemo doctor` shows the servers through the checks."""


def extension(host: Host) -> Extension | None:
    from core.mcp.extension import McpExtension

    return McpExtension(host.config, host.extensions.tools)
