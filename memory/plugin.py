"""Memory's plugin: `mnemo memory …`, its benchmarks, and the extension of a running bot."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.api import Extension

if TYPE_CHECKING:
    import click

    from core.hooks import Host


def register_commands(cli: click.Group) -> None:
    from core.cli import bench_group
    from memory.bench.cli import bench_locomo, bench_memory
    from memory.cli import memory_group

    cli.add_command(memory_group)
    bench = bench_group(cli)
    bench.add_command(bench_locomo)
    bench.add_command(bench_memory)


def extension(host: Host) -> Extension:
    from memory.extension import MemoryExtension
    from memory.files import FileMemory
    from memory.stores import memory_store

    files = FileMemory(host.files)  # the data dir, or `stored_files` on PostgreSQL
    return MemoryExtension(host.config, memory_store(host.storage), files=files)
