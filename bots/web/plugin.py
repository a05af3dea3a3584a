"""The dashboard's plugin: `mnemo web`, `mnemo bench web`, and the extension that serves
it inside `mnemo run` when `[web] enabled`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.api import Extension

if TYPE_CHECKING:
    import click

    from core.hooks import Host


def register_commands(cli: click.Group) -> None:
    from bots.web.bench.run import bench_web
    from bots.web.cli import web_command
    from core.cli import bench_group

    cli.add_command(web_command)
    bench_group(cli).add_command(bench_web)


def extension(host: Host) -> Extension:
    from bots.web.extension import WebExtension

    return WebExtension(host)
