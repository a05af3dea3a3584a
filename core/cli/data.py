"""The user's data from the command line: `mnemo chat export|delete`, `mnemo backup` and
`mnemo restore` (registered by the core's plugin, `core.plugin`)."""

from __future__ import annotations

from pathlib import Path

import click

from core.api import Chat
from core.chat.keys import resolve_chat
from core.cli.runtime import Runtime, current_config, current_source
from core.errors import InputError

CHAT_HELP = "CHAT is channel:chat_id (e.g. telegram:42) or the chat's number."
PG_BACKUP = (
    "mnemo backup and restore copy the SQLite file; [storage] url is PostgreSQL:"
    " use pg_dump and pg_restore"
)


def sqlite_only() -> None:
    """Stop with one line on PostgreSQL, where the server's own tools back up."""
    if current_config().storage.engine == "postgresql":
        raise click.ClickException(PG_BACKUP)


def chat_group(cli: click.Group) -> click.Group:
    """The `mnemo chat` group, where the data commands are added."""
    group = cli.commands["chat"]
    assert isinstance(group, click.Group)
    return group


def _chat(runtime: Runtime, key: str) -> Chat:
    try:
        return resolve_chat(runtime.store, key)
    except InputError as exc:
        raise click.ClickException(str(exc)) from None


@click.command("export", epilog=CHAT_HELP)
@click.argument("chat")
@click.option(
    "--format",
    "form",
    type=click.Choice(["json", "markdown"]),
    default="json",
    show_default=True,
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the export to this file (default: standard output).",
)
@click.option("--force", is_flag=True, help="Overwrite the --output file if it exists.")
def export_command(chat: str, form: str, output: Path | None, force: bool) -> None:
    """Everything kept about CHAT: messages with senders and times, the summary, memories
    with their provenance, learned strategies, notes (AGENTS.md), stored tool results."""
    from core.chat.data import export_chat

    if output is not None and output.exists() and not force:
        raise click.ClickException(
            f"{output} exists; name another file, or overwrite it with --force"
        )
    runtime = current_source().runtime()
    try:
        document = export_chat(runtime.extensions, _chat(runtime, chat))
    finally:
        runtime.close()
    text = document.to_json() if form == "json" else document.to_markdown()
    if output is None:
        click.echo(text, nl=False)
        return
    output.write_text(text, encoding="utf-8")
    counts = ", ".join(f"{len(s.records)} {s.key}" for s in document.sections)
    click.echo(f"wrote {output} ({form}): {counts}", err=True)


@click.command("delete", epilog=CHAT_HELP)
@click.argument("chat")
@click.option("--yes", is_flag=True, help="Delete without asking.")
def delete_command(chat: str, yes: bool) -> None:
    """Delete everything kept about CHAT, as /forgetme does: messages, summary, memories,
    strategies, notes, archives, stored tool results, the reflector's progress."""
    from core.chat.data import KEPT, chat_inventory, describe, forget_chat

    runtime = current_source().runtime()
    try:
        target = _chat(runtime, chat)
        click.echo(f"Chat {target.key}: this deletes, for good:")
        click.echo(describe(chat_inventory(runtime.extensions, target)))
        click.echo(KEPT)
        if not yes:
            click.confirm("Delete it?", abort=True)
        gone = forget_chat(runtime.store, runtime.extensions, target)
    finally:
        runtime.close()
    click.echo(f"Deleted chat {target.key}:\n{describe(gone)}")


@click.command("backup")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite PATH if it exists.")
def backup_command(path: Path, force: bool) -> None:
    """Copy the database to PATH, safely while Mnemo runs (SQLite's online backup), and
    check the copy. PATH may be a directory (the copy is named mnemo-<time>.db)."""
    from core.storage.backup_store import backup_database

    sqlite_only()
    try:
        report = backup_database(current_config().storage.database_path, path, overwrite=force)
    except InputError as exc:
        raise click.ClickException(str(exc)) from None
    for line in report.lines():
        click.echo(line)


@click.command("restore")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--yes", is_flag=True, help="Restore without asking.")
def restore_command(path: Path, yes: bool) -> None:
    """Replace the database with the backup at PATH. Stop every Mnemo process first: a
    database another process has open is refused. The replaced one is kept beside it."""
    from core.storage.backup_store import restore_database

    sqlite_only()
    database = current_config().storage.database_path
    if not yes:
        click.confirm(f"Replace {database} with {path}?", abort=True)
    try:
        report = restore_database(path, database)
    except InputError as exc:
        raise click.ClickException(str(exc)) from None
    for line in report.lines():
        click.echo(line)
    if report.safety_copy is not None:
        click.echo(f"the database it replaced is kept at {report.safety_copy}")
