"""The dashboard's plugin: `mnemo web`, `mnemo bench web`, and the extension that serves
it inside `mnemo run` when `[web] enabled`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import click

    from core.api import Extension
    from core.turn.hooks import Host

# Short help for `mnemo --help`, which lists the commands without importing them.
WEB_HELP = "Serve the operator's dashboard: chats, memories, context, pictures, health."
BENCH_HELP = "Server time of every dashboard page on a seeded database (target: 200 ms)."


def register_commands(cli: click.Group) -> None:
    from core.cli.lazy_group import add_lazy_command
    from core.cli.runtime import bench_group

    add_lazy_command(cli, "web", "bots.web.cli:web_command", WEB_HELP)
    add_lazy_command(bench_group(cli), "web", "bots.web.bench.run:bench_web", BENCH_HELP)


def extension(host: Host) -> Extension:
    from bots.web.extension import WebExtension

    return WebExtension(host)
