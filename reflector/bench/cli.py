"""`mnemo bench reflector`: a pass over N new messages, small history vs large history."""

from __future__ import annotations

import asyncio
import json
import sys

import click


@click.command("reflector")
@click.option("--small", default=1_000, show_default=True, help="History of the small chat.")
@click.option("--large", default=100_000, show_default=True, help="History of the large chat.")
@click.option("--new", "new", default=20, show_default=True, help="New messages per pass.")
@click.option("--repeat", default=7, show_default=True, help="Passes timed per chat.")
@click.option(
    "--embed/--no-embed",
    default=True,
    show_default=True,
    help="Embed facts with the real model (off: keyword dedup only).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_reflector(
    small: int, large: int, new: int, repeat: int, embed: bool, as_json: bool
) -> None:
    """Time a pass over NEW messages in a chat with SMALL vs LARGE history (fake model)."""
    from reflector.bench.run import run_bench

    progress = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    result = asyncio.run(run_bench(small, large, new, repeat, embed, progress=progress))
    if as_json:
        json.dump(result.to_dict(), sys.stdout, indent=2)
        click.echo()
        return
    for line in result.lines():
        click.echo(line)
