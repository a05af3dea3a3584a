"""`mnemo strategies list|show|archive`: the learned strategies with state and counters."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from core.cli.runtime import chat_param, current_config
from core.storage.engine import open_storage
from core.storage.store import SessionStore
from core.storage.stores import session_store
from memory.stores import strategy_store
from memory.strategies.extension import describe
from memory.strategies.lifecycle import ARCHIVED
from memory.strategies.store import StrategyStore


@contextmanager
def open_strategies() -> Iterator[tuple[StrategyStore, SessionStore]]:
    storage = open_storage(current_config().storage)
    try:
        yield strategy_store(storage), session_store(storage)
    finally:
        storage.close()


@click.group("strategies")
def strategies_group() -> None:
    """Learned strategies (SHADOW → PROMOTED → DEMOTED/ARCHIVED)."""


@strategies_group.command("list")
@click.option("--chat", "chat_key", default=None, help="CHANNEL:CHAT_ID (default: global ones).")
@click.option("--all", "show_all", is_flag=True, help="Include archived strategies.")
def list_strategies(chat_key: str | None, show_all: bool) -> None:
    """List strategies of a chat (with the global ones), best first."""
    with open_strategies() as (store, sessions):
        chat_id = chat_param(sessions, chat_key).id if chat_key else None
        found = store.for_chat(chat_id)
        shown = [s for s in found if show_all or s.state != ARCHIVED]
        for strategy in shown:
            click.echo(describe(strategy))
        if not shown:
            click.echo("no strategies")


@strategies_group.command("show")
@click.argument("strategy_id", type=int)
def show_strategy(strategy_id: int) -> None:
    """One strategy and every change made to it."""
    with open_strategies() as (store, _):
        strategy = store.get(strategy_id)
        if strategy is None:
            raise click.ClickException(f"no strategy {strategy_id}")
        click.echo(describe(strategy))
        click.echo(f"created {strategy.created_at}, last used {strategy.last_used_at}")
        for kind, delta, run_id, at in store.events(strategy_id):
            run = f" run {run_id}" if run_id is not None else ""
            click.echo(f"  {at} {kind}{run} {delta}")


@strategies_group.command("archive")
@click.argument("strategy_id", type=int)
def archive_strategy(strategy_id: int) -> None:
    """Archive a strategy (it stops reaching requests; its history stays)."""
    with open_strategies() as (store, _):
        if store.get(strategy_id) is None:
            raise click.ClickException(f"no strategy {strategy_id}")
        store.archive(strategy_id, reason="archived by operator")
        click.echo(f"archived strategy {strategy_id}")
