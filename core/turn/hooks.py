"""The hooks a package implements to plug into Mnemo (after simonw/llm's hookspecs).

A plugin is a module with two functions:

- `register_commands(cli)`: add its `mnemo` subcommands (and `mnemo bench` ones, in
  `cli.commands["bench"]`). Called when `mnemo` starts, so keep imports inside.
- `extension(host)`: the `Extension` it plugs into a running bot, built from what the
  host offers (config, database, stores, model client, the other extensions).

The built-ins (`core.plugin`), memory, learned strategies and the reflector are
all plugins; `bots.plugins.PLUGINS` lists them in registration order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from core.api import Extension
from core.config import Config
from core.context.compaction import Compactor
from core.context.plan import RequestPlanner
from core.model.client import LLM
from core.storage.engine import Storage
from core.storage.file_store import FileStore
from core.storage.store import SessionStore
from core.turn.activity import TurnActivity
from core.turn.extensions import Extensions
from core.turn.outgoing import Outgoing

if TYPE_CHECKING:
    import click


@dataclass(frozen=True)
class Host:
    """What a running bot offers the extensions it builds."""

    config: Config
    storage: Storage
    store: SessionStore
    llm: LLM
    extensions: Extensions
    compactor: Compactor
    planner: RequestPlanner
    # The chats' files (AGENTS.md, tool results, archives): the data dir or `stored_files`.
    files: FileStore
    # How a service sends a message nobody asked for (a reminder): `core.turn.outgoing`.
    outgoing: Outgoing = field(default_factory=Outgoing)
    # Whether a turn runs now (`Agent.answer` marks it): heavy background work waits for a lull.
    activity: TurnActivity = field(default_factory=TurnActivity)


class Plugin(Protocol):
    def register_commands(self, cli: click.Group) -> None: ...

    def extension(self, host: Host) -> Extension | None: ...
