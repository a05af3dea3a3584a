"""The reflector's plugin: `mnemo reflect`, `mnemo reflector`, `mnemo bench reflector`, and
the extension of a running bot."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import click

    from core.api import Extension
    from core.turn.hooks import Host

# Short help for `mnemo --help`, which lists the commands without importing them.
REFLECT_HELP = "Distil facts from unseen messages into memories (one pass), or list past runs."
WORKER_HELP = (
    "Run the reflector on its schedule, alone (beside bot processes on the same database)."
)
BENCH_HELP = "Time a pass over NEW messages in a chat with SMALL vs LARGE history (fake model)."


def register_commands(cli: click.Group) -> None:
    from core.cli.lazy_group import add_lazy_command
    from core.cli.runtime import bench_group

    add_lazy_command(cli, "reflect", "reflector.cli:reflect", REFLECT_HELP)
    add_lazy_command(cli, "reflector", "reflector.cli:reflector_worker", WORKER_HELP)
    add_lazy_command(
        bench_group(cli), "reflector", "reflector.bench.cli:bench_reflector", BENCH_HELP
    )


def extension(host: Host) -> Extension:
    from reflector.extension import ReflectorExtension
    from reflector.stores import build_reflector

    return ReflectorExtension(host.config, build_reflector(host.config, host.storage, host.llm))
