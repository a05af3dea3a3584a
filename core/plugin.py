"""The core's own plugin: the built-in commands and tools, `mnemo inspect`, the data
commands (`mnemo chat export|delete`, `mnemo backup|restore`), its benches."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from core.api import Extension
    from core.turn.hooks import Host

# Each command's short help for `mnemo --help`, which lists them without importing them
# (tests/bots/test_cli.py checks they match the commands' own).
INSPECT_HELP = "Show what CHAT's next request holds (CHAT is channel:chat_id, e.g. terminal:local)."
EXPORT_HELP = (
    "Everything kept about CHAT: messages with senders and times, the summary, memories"
    " with their provenance, learned strategies, notes (AGENTS.md), stored tool results."
)
DELETE_HELP = (
    "Delete everything kept about CHAT, as /forgetme does: messages, summary, memories,"
    " strategies, notes, archives, stored tool results, the reflector's progress."
)
BACKUP_HELP = (
    "Copy the database to PATH, safely while Mnemo runs (SQLite's online backup), and"
    " check the copy."
)
RESTORE_HELP = "Replace the database with the backup at PATH."
BENCHES = {
    "longrun": "A long chat with a 20 KB tool result every third turn (fake model, real"
    " tokenizer).",
    "startup": "Wall time and memory of `mnemo chat`, `mnemo doctor` and `mnemo run` (fake model).",
    "kv": "KV-cache reuse of a long chat with memories on a real llama-cpp-python server.",
    "chaos": "Messages stored, answered and delivered after a kill -9, a SIGTERM and under load.",
    "scale": "Turns per second and CPU per turn: 1 process on SQLite, N on PostgreSQL.",
    "media": "What TURNS image turns cost a chat: each request's growth against the cap, its"
    " planned tokens against the window, image bytes left in the stored session (target 0),"
    " time per image turn.",
}


def register_commands(cli: click.Group) -> None:
    from core.cli.lazy_group import add_lazy_command
    from core.cli.runtime import bench_group

    chat = cli.commands["chat"]
    assert isinstance(chat, click.Group)
    for group, name, target, help in (
        (cli, "inspect", "core.cli.runtime:inspect_command", INSPECT_HELP),
        (chat, "export", "core.cli.data:export_command", EXPORT_HELP),
        (chat, "delete", "core.cli.data:delete_command", DELETE_HELP),
        (cli, "backup", "core.cli.data:backup_command", BACKUP_HELP),
        (cli, "restore", "core.cli.data:restore_command", RESTORE_HELP),
    ):
        add_lazy_command(group, name, target, help)
    for name, help in BENCHES.items():
        add_lazy_command(bench_group(cli), name, f"core.bench.{name}:bench_{name}", help)


def extension(host: Host) -> Extension:
    from core.turn.builtins import CoreExtension

    return CoreExtension(
        host.config, host.store, host.extensions, host.compactor, host.planner, host.files
    )
