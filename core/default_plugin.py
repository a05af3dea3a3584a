"""The core's own plugin: the built-in commands and tools, `mnemo inspect`, the data
commands (`mnemo chat export|delete`, `mnemo backup|restore`), its benches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.api import Extension

if TYPE_CHECKING:
    import click

    from core.hooks import Host


def register_commands(cli: click.Group) -> None:
    from core.bench.chaos import bench_chaos
    from core.bench.kv import bench_kv
    from core.bench.longrun import bench_longrun
    from core.bench.scale import bench_scale
    from core.bench.startup import bench_startup
    from core.cli import bench_group, inspect_command
    from core.data_cli import (
        backup_command,
        chat_group,
        delete_command,
        export_command,
        restore_command,
    )

    cli.add_command(inspect_command)
    chat_group(cli).add_command(export_command)
    chat_group(cli).add_command(delete_command)
    cli.add_command(backup_command)
    cli.add_command(restore_command)
    bench_group(cli).add_command(bench_longrun)
    bench_group(cli).add_command(bench_startup)
    bench_group(cli).add_command(bench_kv)
    bench_group(cli).add_command(bench_chaos)
    bench_group(cli).add_command(bench_scale)


def extension(host: Host) -> Extension:
    from core.builtins import CoreExtension

    return CoreExtension(
        host.config, host.store, host.extensions, host.compactor, host.planner, host.files
    )
