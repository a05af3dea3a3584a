"""`mnemo storage migrate --to postgresql://…`: the composition root's command, because
it gathers every plugin's rebuild step (`after_storage_copy`, e.g. memory's vectors)."""

from __future__ import annotations

import json
import sys

import click

from bots.plugins import PLUGINS
from core.cli.runtime import current_config
from core.errors import MnemoError
from core.storage.migration import AfterCopy, migrate_to_postgresql
from core.storage.pg_db import redact_url


def after_copy_steps() -> tuple[AfterCopy, ...]:
    """Each plugin's optional `after_storage_copy(db) -> str` (what it rebuilt)."""
    steps = (getattr(plugin, "after_storage_copy", None) for plugin in PLUGINS)
    return tuple(step for step in steps if step is not None)


@click.group("storage")
def storage_group() -> None:
    """Move the store between engines."""


@storage_group.command("migrate")
@click.option("--to", "target", required=True, help="postgresql://user:password@host/database")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def migrate_command(target: str, as_json: bool) -> None:
    """Copy everything from the configured SQLite store (and its chat files) into an empty
    PostgreSQL database, in one transaction, and verify every table's row count. Stop the
    bot first; afterwards set [storage] url to the target."""
    config = current_config()
    if not target.startswith(("postgresql://", "postgres://")):
        raise click.ClickException("--to must be a postgresql:// URL")
    click.echo(
        f"copying {config.storage.database_path} to {redact_url(target)} …",
        err=True,
    )
    try:
        report = migrate_to_postgresql(
            config,
            target,
            progress=lambda line: click.echo(f"  {line}", err=True),
            after_copy=after_copy_steps(),
        )
    except MnemoError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        for table in report.tables:
            mark = "ok" if table.ok else "DIFFERS"
            click.echo(
                f"{table.table:28} {table.source_rows:>10,} {table.target_rows:>10,}  {mark}"
            )
        verdict = "verified" if report.ok else "DIFFER"
        click.echo(
            f"{report.rows:,} rows and {report.files:,} files in {report.seconds:.1f} s"
            f" ({report.rows_per_second:,.0f} rows/s); counts {verdict}"
        )
    if not report.ok:
        sys.exit(1)
    click.echo(f'now set [storage] url = "{redact_url(target)}" (with its password)', err=True)
