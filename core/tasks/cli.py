"""`mnemo tasks list | cancel ID`: every chat's scheduled tasks, for the operator."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from core.storage.store import SessionStore
    from core.tasks.task_store import TaskStore


@contextmanager
def open_tasks() -> Iterator[tuple[TaskStore, SessionStore]]:
    """The task store and the session store on `[storage]`'s engine."""
    from core.cli.runtime import current_config
    from core.storage.engine import open_storage
    from core.storage.stores import session_store
    from core.tasks.task_store import TaskStore

    config = current_config()
    storage = open_storage(config.storage)
    try:
        yield TaskStore(storage.database), session_store(storage)
    finally:
        storage.close()


@click.group("tasks")
def tasks_group() -> None:
    """Scheduled tasks and reminders: list them, cancel one."""


@tasks_group.command("list")
@click.option("--chat", default=None, help="Only this chat's: channel:chat_id or its number.")
@click.option("--all", "show_all", is_flag=True, help="Finished and cancelled ones too.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def list_command(chat: str | None, show_all: bool, as_json: bool) -> None:
    """Every chat's open tasks (active or paused), soonest first."""
    from core.cli.runtime import chat_param
    from core.tasks.extension import describe_task, task_record

    with open_tasks() as (tasks, sessions):
        if chat:
            found = tasks.for_chat(chat_param(sessions, chat).id, open_only=not show_all)
        else:
            found = tasks.every_task(open_only=not show_all)
    if as_json:
        records = [{**task_record(task), "chat": task.chat.key} for task in found]
        click.echo(json.dumps({"tasks": records}))
        return
    if not found:
        click.echo("No scheduled tasks.")
    for task in found:
        click.echo(f"{task.chat.key}  {describe_task(task)}")


@tasks_group.command("cancel")
@click.argument("task_id", type=int)
def cancel_command(task_id: int) -> None:
    """Cancel the task TASK_ID (its number in `mnemo tasks list`)."""
    with open_tasks() as (tasks, _sessions):
        task = tasks.get(task_id)
        if task is None or not tasks.cancel(task_id):
            raise click.ClickException(f"no open task #{task_id}")
    click.echo(f"cancelled task #{task_id} in {task.chat.key}: {task.text[:80]}")
