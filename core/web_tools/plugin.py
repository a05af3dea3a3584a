"""The web tools' plugin: `web_fetch` and `web_search` for a bot (`[web_tools]`); `mnemo
doctor` shows them through the extension's checks."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import click

    from core.api import Extension
    from core.turn.hooks import Host


def register_commands(cli: click.Group) -> None:
    """No commands of its own."""


def extension(host: Host) -> Extension:
    from core.web_tools.extension import WebToolsExtension

    return WebToolsExtension(host.config)
