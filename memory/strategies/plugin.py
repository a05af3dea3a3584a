"""The learned strategies' plugin: `mnemo strategies …` and the extension of a running bot."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.api import Extension

if TYPE_CHECKING:
    import click

    from core.hooks import Host


def register_commands(cli: click.Group) -> None:
    from memory.strategies.cli import strategies_group

    cli.add_command(strategies_group)


def extension(host: Host) -> Extension:
    from memory.stores import strategy_store
    from memory.strategies.extension import StrategyExtension

    return StrategyExtension(strategy_store(host.storage))
