"""The scheduled tasks' plugin: `mnemo tasks …`, `mnemo bench tasks`, and the extension."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import click

    from core.api import Extension
    from core.turn.hooks import Host


# Short help for `mnemo --help`, which lists the commands without importing them.
TASKS_HELP = "Scheduled tasks and reminders: list them, cancel one."
BENCH_HELP = (
    "N tasks due within SPREAD seconds, fired by 2 processes on PostgreSQL and 1 on SQLite:"
    " delivered, duplicates, lateness p50/p95."
)


def register_commands(cli: click.Group) -> None:
    from core.cli.lazy_group import add_lazy_command
    from core.cli.runtime import bench_group

    add_lazy_command(cli, "tasks", "core.tasks.cli:tasks_group", TASKS_HELP)
    add_lazy_command(bench_group(cli), "tasks", "core.tasks.bench:bench_tasks", BENCH_HELP)


def extension(host: Host) -> Extension:
    from core.tasks.extension import TasksExtension

    return TasksExtension(host.config, host.storage.database, host.outgoing)
