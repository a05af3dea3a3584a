"""The sub-agents plugin: the `spawn_agent` tool and its stored runs (no CLI commands of
its own; `mnemo inspect` shows the runs through the extension's report lines)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import click

    from core.api import Extension
    from core.turn.hooks import Host


def register_commands(cli: click.Group) -> None:
    """Nothing to add."""


def extension(host: Host) -> Extension:
    from core.subagents.extension import SubagentsExtension
    from core.subagents.run_store import DatabaseSubagentRunStore
    from core.subagents.runner import SubagentRunner

    runs = DatabaseSubagentRunStore(host.storage.database)
    runner = SubagentRunner(
        host.config, host.store, host.llm, host.extensions.tools, host.files, runs
    )
    return SubagentsExtension(runner, runs)
