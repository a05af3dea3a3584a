"""The learned strategies' plugin: `mnemo strategies …` and the extension of a running bot."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import click

    from core.api import Extension
    from core.turn.hooks import Host

# Short help for `mnemo --help`, which lists the command without importing it.
HELP = "Learned strategies (SHADOW → PROMOTED → DEMOTED/ARCHIVED)."


def register_commands(cli: click.Group) -> None:
    from core.cli.lazy_group import add_lazy_command

    add_lazy_command(cli, "strategies", "memory.strategies.cli:strategies_group", HELP)


def extension(host: Host) -> Extension:
    from memory.stores import strategy_store
    from memory.strategies.extension import StrategyExtension

    return StrategyExtension(strategy_store(host.storage))
