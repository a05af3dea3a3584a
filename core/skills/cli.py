"""`mnemo skills list | add PATH|URL | remove NAME`, for the global scope or, with
`--channel`/`--chat`, a channel's or a chat's. Adding never runs anything from the skill."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from core.config import Config
    from core.skills.catalog import SkillLimits
    from core.storage.file_store import FileStore
    from core.storage.store import SessionStore

CHAT_HELP = "A chat's own skills: channel:chat_id (e.g. telegram:-100123) or its number."
CHANNEL_HELP = "A channel's skills (telegram, discord, terminal)."


@contextmanager
def open_files() -> Iterator[tuple[Config, FileStore, SessionStore]]:
    """The config, the file store and the session store on `[storage]`'s engine."""
    from core.cli.runtime import current_config
    from core.storage.engine import open_storage
    from core.storage.stores import file_store, session_store

    config = current_config()
    storage = open_storage(config.storage)
    try:
        yield config, file_store(storage, config.storage.data_dir), session_store(storage)
    finally:
        storage.close()


def limits_of(config: Config) -> SkillLimits:
    from core.skills.catalog import SkillLimits

    return SkillLimits(config.skills.description_max_chars, config.skills.skill_max_chars)


def scope_of(sessions: SessionStore, chat: str | None, channel: str | None) -> tuple[str, str, str]:
    """(scope, channel, chat_id) named by the options; global when neither is given."""
    from core.api import split_chat_key
    from core.cli.runtime import chat_param

    if chat and channel:
        raise click.UsageError("give --chat or --channel, not both")
    if channel:
        return "channel", channel, ""
    if not chat:
        return "global", "", ""
    parts = split_chat_key(chat)
    if parts is None:
        found = chat_param(sessions, chat)
        return "chat", found.channel, found.external_chat_id
    return "chat", parts[0], parts[1]


def scope_options(function: click.decorators.FC) -> click.decorators.FC:
    function = click.option("--channel", default=None, help=CHANNEL_HELP)(function)
    return click.option("--chat", default=None, help=CHAT_HELP)(function)


@click.group("skills")
def skills_group() -> None:
    """Skills: SKILL.md folders whose list the model sees and which it reads on demand."""


@skills_group.command("list")
@scope_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def list_command(chat: str | None, channel: str | None, as_json: bool) -> None:
    """The skills a chat (or a channel, or everyone) can use, and the broken ones."""
    from core.skills.catalog import SCOPES, SkillCatalog
    from core.skills.extension import describe_skills

    with open_files() as (config, files, sessions):
        scope, channel_name, chat_id = scope_of(sessions, chat, channel)
        catalog = SkillCatalog(files, limits_of(config))
        dirs = catalog.scope_dirs(channel_name, chat_id)[: SCOPES.index(scope) + 1]
        skills, problems = catalog.for_dirs(dirs)
    if as_json:
        records = [
            {"name": s.name, "scope": s.scope, "description": s.description, "folder": s.folder}
            for s in skills
        ]
        broken = [{"path": p.path, "reason": p.reason} for p in problems]
        click.echo(json.dumps({"skills": records, "broken": broken}))
        return
    click.echo(describe_skills(skills, problems))


@skills_group.command("add")
@click.argument("source")
@scope_options
@click.option("--force", is_flag=True, help="Replace a skill of the same name.")
def add_command(source: str, chat: str | None, channel: str | None, force: bool) -> None:
    """Add the skill in the folder or .zip file SOURCE, or in the zip at the URL SOURCE
    (fetched through the guard of `[fetch]`). Nothing in it is run."""
    from core.errors import FetchError, SkillError
    from core.skills.catalog import scope_dir
    from core.skills.install import (
        bundle_from_dir,
        bundle_from_url,
        bundle_from_zip,
        install_bundle,
    )
    from core.tools.guarded_fetch import FetchPolicy

    with open_files() as (config, files, sessions):
        scope, channel_name, chat_id = scope_of(sessions, chat, channel)
        try:
            if source.startswith(("http://", "https://")):
                policy = FetchPolicy.from_config(config.fetch)
                bundle = asyncio.run(bundle_from_url(source, policy))
            elif Path(source).is_file():
                bundle = bundle_from_zip(Path(source).read_bytes())
            else:
                bundle = bundle_from_dir(Path(source))
            directory = scope_dir(scope, channel_name, chat_id)
            done = install_bundle(files, bundle, directory, limits_of(config), force=force)
        except (SkillError, FetchError, OSError) as exc:
            raise click.ClickException(str(exc)) from None
        where = files.location(done.folder + "SKILL.md")
    click.echo(f"added skill {done.name} ({scope}, {done.files} files): {where}")
    for skipped in done.skipped:
        click.echo(f"  left out: {skipped}")


@skills_group.command("remove")
@click.argument("name")
@scope_options
def remove_command(name: str, chat: str | None, channel: str | None) -> None:
    """Remove the skill NAME from the scope (global unless --chat/--channel)."""
    from core.errors import SkillError
    from core.skills.catalog import scope_dir
    from core.skills.install import remove_skill

    with open_files() as (_config, files, sessions):
        scope, channel_name, chat_id = scope_of(sessions, chat, channel)
        try:
            gone = remove_skill(files, scope_dir(scope, channel_name, chat_id), name)
        except SkillError as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(f"removed skill {name} ({scope}, {gone} files)")
