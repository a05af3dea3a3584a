"""The reflector's plugin: `mnemo reflect`, `mnemo reflector`, `mnemo bench reflector`, and
the extension of a running bot."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.api import Extension

if TYPE_CHECKING:
    import click

    from core.hooks import Host


def register_commands(cli: click.Group) -> None:
    from core.cli import bench_group
    from reflector.bench.cli import bench_reflector
    from reflector.cli import reflect, reflector_worker

    cli.add_command(reflect)
    cli.add_command(reflector_worker)
    bench_group(cli).add_command(bench_reflector)


def extension(host: Host) -> Extension:
    from reflector.extension import ReflectorExtension
    from reflector.stores import build_reflector

    return ReflectorExtension(host.config, build_reflector(host.config, host.storage, host.llm))
