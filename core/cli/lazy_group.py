"""Subcommands imported only when they run: `mnemo --help` lists them without loading them.

A plugin registers a command by its import path and one line of help
(`add_lazy_command(cli, "memory", "memory.cli:memory_group", "…")`); the module is imported
when the command is invoked, asked for its own help, or completed. This keeps `mnemo
--version` and `mnemo --help` free of pydantic, numpy, the database drivers and the chat
SDKs (after click's own `LazyGroup` recipe).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import click


@dataclass(frozen=True)
class LazyCommand:
    """Where a command lives (`module:attribute`) and its short help, shown unloaded."""

    target: str
    help: str

    def short_help(self, limit: int) -> str:
        """What `--help` lists for it: shortened as click shortens a loaded command's help."""
        return click.Command(None, help=self.help).get_short_help_str(limit)

    def load(self) -> click.Command:
        module_name, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is not a click command")
        return command


class LazyGroup(click.Group):
    """A group whose registered-by-path commands are imported on first use."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy_commands: dict[str, LazyCommand] = {}

    def add_lazy(self, name: str, target: str, help: str) -> None:
        """Register `name` as the command at `target` (`module:attribute`), not imported yet."""
        self.lazy_commands[name] = LazyCommand(target, help)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            self.add_command(self.lazy_commands[cmd_name].load(), cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list with each command's short help, importing none of them."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            loaded = self.commands.get(name)
            if loaded is not None and loaded.hidden:
                continue
            help = (
                loaded.get_short_help_str(limit)
                if loaded is not None
                else self.lazy_commands[name].short_help(limit)
            )
            rows.append((name, help))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def add_lazy_command(group: click.Group, name: str, target: str, help: str) -> None:
    """Add the command at `target` to `group`: lazily on a `LazyGroup`, else imported now."""
    command = LazyCommand(target, help)
    if isinstance(group, LazyGroup):
        group.add_lazy(name, target, help)
    else:
        group.add_command(command.load(), name)
