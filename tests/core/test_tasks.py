"""Scheduled tasks on both engines: the store, claims exactly once across claimers, the
runner's reminders, missed runs, `run` prompts and pauses, the tools' checks and limits,
the chat commands, and a reminder delivered through the dispatcher like a reply."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bots.runtime import Runtime, build_runtime
from core.api import Chat, Inbound, Outbound, TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.config import Config, StorageConfig, TasksConfig
from core.storage.engine import Storage, open_storage
from core.storage.stores import delivery_store, session_store
from core.tasks.extension import TasksExtension
from core.tasks.runner import TaskRunner, task_of_run
from core.tasks.task_store import NewTask, RunOutcome, TaskStore
from core.turn.lease import TurnLeases
from core.turn.outgoing import Outgoing
from tests.conftest import run_mnemo, write_config
from tests.fakes.channels import RecordingChannel

T0 = 1_800_000_000.0  # a fixed "now" for the store and runner tests


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def new_task(chat: Chat, due: float, text: str = "call Ann", **fields: str) -> NewTask:
    values = {"mode": "remind", "schedule_kind": "date", "expression": "", "timezone": "UTC"}
    values.update(fields)
    if values["schedule_kind"] == "date" and not values["expression"]:
        values["expression"] = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(due))
    return NewTask("42", "Ann", values["mode"], text, values["schedule_kind"],
                   values["expression"], values["timezone"], chat_id=chat.id,
                   next_run_at=due)  # fmt: skip


@pytest.fixture
def chat(storage: Storage) -> Chat:
    return session_store(storage).get_or_create_chat("terminal", "c1", "", "private")


def outbox_texts(storage: Storage, chat: Chat) -> list[str]:
    return [r.outbound.text for r in delivery_store(storage).undelivered(chat.id, 50)]


# -- the store --------------------------------------------------------------------------------


def test_a_due_task_is_claimed_once_until_its_lease_expires(storage: Storage, chat: Chat) -> None:
    tasks = TaskStore(storage.database)
    task = tasks.add(new_task(chat, T0))
    assert tasks.claim_due("a", T0 - 1, T0 + 60, 10) == []  # not due yet
    assert tasks.next_due_at(T0 - 1) == T0
    assert [t.id for t in tasks.claim_due("a", T0, T0 + 60, 10)] == [task.id]
    assert tasks.next_due_at(T0 + 1) == T0 + 60  # leased: worth a look when the lease ends
    assert tasks.claim_due("b", T0 + 1, T0 + 61, 10) == []  # leased to a
    outcome = RunOutcome(None, "done", 0, ran=True)
    assert not tasks.finish_run(task.id, "b", outcome, T0)  # b holds no lease
    reclaimed = tasks.claim_due("b", T0 + 60, T0 + 120, 10)  # a's lease ran out
    assert [t.id for t in reclaimed] == [task.id]
    assert not tasks.finish_run(task.id, "a", outcome, T0)  # a lost it
    assert tasks.finish_run(task.id, "b", outcome, T0 + 60)
    done = tasks.get(task.id)
    assert done is not None and (done.status, done.runs, done.next_run_at) == ("done", 1, None)
    assert tasks.claim_due("c", T0 + 999, T0 + 1999, 10) == []


def test_cancel_and_time_zones(storage: Storage, chat: Chat) -> None:
    tasks = TaskStore(storage.database)
    other = session_store(storage).get_or_create_chat("terminal", "c2", "", "private")
    task = tasks.add(new_task(chat, T0))
    assert not tasks.cancel(task.id, other.id)  # not that chat's
    assert tasks.cancel(task.id, chat.id)
    assert not tasks.cancel(task.id)  # already cancelled
    assert tasks.for_chat(chat.id) == []
    assert [t.status for t in tasks.for_chat(chat.id, open_only=False)] == ["cancelled"]
    assert tasks.timezone_of(chat.id) is None
    tasks.set_timezone(chat.id, "Europe/Berlin")
    tasks.set_timezone(chat.id, "Asia/Tokyo")
    assert tasks.timezone_of(chat.id) == "Asia/Tokyo"


def test_two_concurrent_claimers_take_each_task_exactly_once(
    storage: Storage, chat: Chat, storage_url: str
) -> None:
    tasks = TaskStore(storage.database)
    ids = {tasks.add(new_task(chat, T0 + n % 7)).id for n in range(120)}
    claimed: dict[str, list[int]] = {"a": [], "b": []}

    def claim(owner: str) -> None:
        other = open_storage(StorageConfig(url=storage_url))
        try:
            mine = TaskStore(other.database)
            while batch := mine.claim_due(owner, T0 + 10, T0 + 100, 7):
                claimed[owner].extend(t.id for t in batch)
        finally:
            other.close()

    threads = [threading.Thread(target=claim, args=(owner,)) for owner in claimed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(claimed["a"] + claimed["b"]) == sorted(ids)  # every task, none twice


# -- the runner -------------------------------------------------------------------------------


def runner(storage: Storage, clock: Clock, **settings: object) -> TaskRunner:
    config = TasksConfig(**settings)  # type: ignore[arg-type]
    return TaskRunner(config, storage.database, Outgoing(), clock=clock)


def test_a_reminder_is_stored_once_however_many_runners_fire(storage: Storage, chat: Chat) -> None:
    tasks = TaskStore(storage.database)
    task = tasks.add(new_task(chat, T0))
    clock = Clock(T0 + 0.5)
    first, second = runner(storage, clock), runner(storage, clock)
    assert first.fire_due() == 1
    assert second.fire_due() == 0
    assert outbox_texts(storage, chat) == ["⏰ Reminder: call Ann"]
    # A runner that lost its lease cannot store the run again (same origin, lease checked).
    claimed = tasks.get(task.id)
    assert claimed is not None and claimed.status == "done"


def test_a_repeating_reminder_is_scheduled_again(storage: Storage, chat: Chat) -> None:
    tasks = TaskStore(storage.database)
    task = tasks.add(new_task(chat, T0, schedule_kind="interval", expression="3600"))
    clock = Clock(T0 + 1)
    runner(storage, clock).fire_due()
    again = tasks.get(task.id)
    assert again is not None and (again.status, again.next_run_at) == ("active", T0 + 3600)
    clock.now = T0 + 3600 + 2
    runner(storage, clock).fire_due()
    assert outbox_texts(storage, chat) == ["⏰ Reminder: call Ann"] * 2


def test_a_run_late_by_more_than_the_grace_time_is_reported_missed(
    storage: Storage, chat: Chat
) -> None:
    tasks = TaskStore(storage.database)
    tasks.add(new_task(chat, T0, text="late one"))
    tasks.add(new_task(chat, T0 + 3000, text="within grace"))
    runner(storage, Clock(T0 + 3700), grace_s=3600).fire_due()
    texts = outbox_texts(storage, chat)
    assert texts[0].startswith("⏰ Missed (due ") and texts[0].endswith("late one")
    assert texts[1] == "⏰ Reminder: within grace"


def test_a_run_task_becomes_a_pending_message_of_the_creator(storage: Storage, chat: Chat) -> None:
    tasks = TaskStore(storage.database)
    task = tasks.add(new_task(chat, T0, text="summarise my notes", mode="run"))
    runner(storage, Clock(T0 + 1)).fire_due()
    pending = delivery_store(storage).next_pending(chat.id)
    assert pending is not None
    assert task_of_run(pending.inbound.message_id) == task.id
    assert pending.inbound.sender_id == "42" and "summarise my notes" in pending.inbound.text
    after = tasks.get(task.id)
    assert after is not None and after.failures == 1  # until its turn answers
    tasks.run_worked(task.id)
    worked = tasks.get(task.id)
    assert worked is not None and worked.failures == 0


def test_a_task_failing_too_often_is_paused_and_the_chat_told(storage: Storage, chat: Chat) -> None:
    tasks = TaskStore(storage.database)
    task = tasks.add(new_task(chat, T0, schedule_kind="interval", expression="600", mode="run"))
    clock = Clock(T0 + 1)
    for n in range(3):  # three runs whose turns never answered
        clock.now = T0 + 600 * n + 1
        runner(storage, clock, max_failures=3).fire_due()
    clock.now = T0 + 1801
    runner(storage, clock, max_failures=3).fire_due()
    paused = tasks.get(task.id)
    assert paused is not None and paused.status == "paused"
    assert any(f"Task #{task.id}" in t and "paused" in t for t in outbox_texts(storage, chat))
    clock.now = T0 + 9999
    assert runner(storage, clock).fire_due() == 0
    assert tasks.status_counts(T0 + 9999) == {"active": 0, "paused": 1, "overdue": 0}


# -- tools and commands -----------------------------------------------------------------------


@pytest.fixture
def config(config: Config, storage_url: str) -> Config:
    config.storage.url = storage_url
    return config


@pytest.fixture
def rt(config: Config) -> Iterator[Runtime]:
    runtime = build_runtime(config)
    yield runtime
    runtime.close()


def extension_of(runtime: Runtime) -> TasksExtension:
    found = [e for e in runtime.extensions if isinstance(e, TasksExtension)]
    assert found
    return found[0]


def turn_in(runtime: Runtime, kind: str = "private", **inbound: object) -> TurnContext:
    chat = runtime.store.get_or_create_chat("terminal", "t1", "", kind)
    message = Inbound("terminal", "t1", "hi", sender_id="7", sender_name="Bo",
                      chat_kind=kind, **inbound)  # type: ignore[arg-type]  # fmt: skip
    return TurnContext(chat, message)


async def call(runtime: Runtime, turn: TurnContext, tool: str, args: str) -> str:
    return await runtime.extensions.tools.execute(tool, args, turn)


async def test_schedule_list_and_cancel_through_the_tools(rt: Runtime) -> None:
    turn = turn_in(rt)
    said = await call(rt, turn, "schedule_task", '{"when": "in 2 hours", "text": "stretch"}')
    assert said.startswith("scheduled: #") and "stretch" in said
    listed = await call(rt, turn, "list_tasks", "{}")
    assert "stretch" in listed and "remind" in listed
    task_id = int(said.split("#")[1].split()[0])
    assert await call(rt, turn, "cancel_task", f'{{"id": {task_id}}}') == (
        f"cancelled task #{task_id} (stretch)"
    )
    assert "error: no open task" in await call(rt, turn, "cancel_task", f'{{"id": {task_id}}}')


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ('{"when": "2001-01-01T00:00", "text": "x"}', "in the past"),
        ('{"when": "whenever", "text": "x"}', "cannot read the time"),
        ('{"when": "* * * * *", "text": "x"}', "at most every 5 minutes"),
        ('{"when": "in 1 hour", "text": "x", "mode": "shout"}', "mode must be remind or run"),
        ('{"when": "in 1 hour", "text": "  "}', "text must be"),
    ],
)
async def test_bad_input_is_a_clear_tool_error_and_stores_nothing(
    rt: Runtime, args: str, says: str
) -> None:
    turn = turn_in(rt)
    answer = await call(rt, turn, "schedule_task", args)
    assert answer.startswith("error: ") and says in answer
    assert TaskStore(rt.storage.database).count_for_chat(turn.chat.id) == 0


async def test_a_chat_unknown_time_zone_and_the_timezone_command(rt: Runtime) -> None:
    turn = turn_in(rt)
    timezone = rt.extensions.command("timezone")
    assert timezone is not None
    assert "Not changed: unknown time zone 'Nowhere/Land'" in await timezone.handler(
        turn, "Nowhere/Land"
    )
    assert "now Europe/Berlin" in await timezone.handler(turn, "Europe/Berlin")
    said = await call(rt, turn, "schedule_task", '{"when": "2099-01-01T09:00", "text": "y"}')
    assert "09:00 CET" in said  # read in the chat's zone


async def test_a_chats_zone_is_its_own_else_tasks_default_else_memory_timezone(
    rt: Runtime, config: Config
) -> None:
    """One default for every reader of a chat's days: `[memory] timezone`; `[tasks]
    default_timezone`, when set, overrides it for tasks; a chat's /timezone wins over both."""
    turn = turn_in(rt)
    tasks = extension_of(rt)
    config.memory.timezone = "Asia/Tokyo"
    assert config.tasks.default_timezone == ""
    assert tasks.timezone_of(turn.chat) == "Asia/Tokyo"
    said = await call(rt, turn, "schedule_task", '{"when": "2099-01-01T09:00", "text": "y"}')
    assert "09:00 JST" in said  # read in [memory] timezone
    config.tasks.default_timezone = "Europe/Lisbon"
    assert tasks.timezone_of(turn.chat) == "Europe/Lisbon"
    tasks.tasks.set_timezone(turn.chat.id, "America/New_York")
    assert tasks.timezone_of(turn.chat) == "America/New_York"


async def test_limits_groups_and_runs(rt: Runtime, config: Config) -> None:
    config.tasks.max_active_per_chat = 2
    turn = turn_in(rt)
    for _ in range(2):
        assert "scheduled" in await call(
            rt, turn, "schedule_task", '{"when":"in 1 day","text":"a"}'
        )
    capped = await call(rt, turn, "schedule_task", '{"when": "in 1 day", "text": "a"}')
    assert "already has 2 active tasks" in capped
    group = turn_in(rt, kind="group")
    refused = await call(rt, group, "schedule_task", '{"when": "in 1 day", "text": "a"}')
    assert "only an admin" in refused
    admin = replace(group, inbound=replace(group.inbound, sender_is_admin=True))
    assert "limit" in await call(rt, admin, "schedule_task", '{"when":"in 1 day","text":"a"}')
    in_run = replace(turn, inbound=replace(turn.inbound, message_id="mnemo-task:1:5"))
    nested = await call(rt, in_run, "schedule_task", '{"when": "in 1 day", "text": "a"}')
    assert "cannot schedule further tasks" in nested


async def test_doctor_warns_of_overdue_tasks(rt: Runtime) -> None:
    extension = extension_of(rt)
    [quiet] = await extension.checks()
    assert (quiet.ok, quiet.detail) == (True, "0 active, 0 paused")
    extension.schedule(turn_in(rt), "in 1 second", "ping", "remind")
    extension.clock = lambda: time.time() + 120  # no runner fired it
    [late] = await extension.checks()
    assert not late.ok and not late.fatal and "1 overdue" in late.detail


async def test_tasks_and_cancel_commands(rt: Runtime) -> None:
    turn = turn_in(rt)
    await call(rt, turn, "schedule_task", '{"when": "every day at 9", "text": "water plants"}')
    tasks_command, cancel = rt.extensions.command("tasks"), rt.extensions.command("cancel")
    assert tasks_command is not None and cancel is not None
    listed = await tasks_command.handler(turn, "")
    assert "water plants" in listed and "cron '0 9 * * *'" in listed
    task_id = listed.split("#")[1].split()[0]
    assert (await cancel.handler(turn, "x")).startswith("Usage: /cancel N")
    assert "cancelled task" in await cancel.handler(turn, task_id)
    assert "No scheduled tasks" in await tasks_command.handler(turn, "")


# -- delivery: a message nobody asked for, through the dispatcher ------------------------------


async def test_a_reminder_goes_out_through_the_dispatcher_once(rt: Runtime) -> None:
    channel = RecordingChannel("terminal")
    rt.dispatcher.attach(channel)
    extension = extension_of(rt)
    turn = turn_in(rt)
    extension.schedule(turn, "in 1 second", "drink water", "remind")
    service = asyncio.create_task(extension.runner.run())
    try:
        async with asyncio.timeout(10):
            while not channel.sent:  # noqa: ASYNC110 (the runner and dispatcher fill it)
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)  # room for a duplicate, were there one
    finally:
        service.cancel()
        await asyncio.gather(service, return_exceptions=True)
        await rt.dispatcher.stop()
    assert channel.texts("t1") == ["⏰ Reminder: drink water"]
    totals = rt.deliveries.delivery_totals("terminal")
    assert (totals.replies, totals.delivered) == (1, 1)


async def test_a_run_task_is_answered_in_the_chat_and_cannot_schedule_more(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    def model(request: dict[str, Any]) -> FakeReply:
        last = request["messages"][-1]
        if last["role"] == "tool":
            return FakeReply(content=f"Tried: {last['content']}")
        return FakeReply(tool_calls=[tool_call("schedule_task", {"when": "in 1 day", "text": "x"})])

    fake_llm.responder = model
    channel = RecordingChannel("terminal")
    rt.dispatcher.attach(channel)
    extension = extension_of(rt)
    task = extension.schedule(turn_in(rt), "in 1 second", "plan my week", "run")
    service = asyncio.create_task(extension.runner.run())
    try:
        async with asyncio.timeout(15):
            while not channel.sent:  # noqa: ASYNC110 (the runner and dispatcher fill it)
                await asyncio.sleep(0.02)
    finally:
        service.cancel()
        await asyncio.gather(service, return_exceptions=True)
        await rt.dispatcher.stop()
    [reply] = channel.texts("t1")
    assert "cannot schedule further tasks" in reply
    prompt = [m for m in fake_llm.requests[0]["messages"] if m["role"] == "user"][-1]
    assert f"[Scheduled task #{task.id}, set by Bo; do it now] plan my week" in str(prompt)
    tasks = TaskStore(rt.storage.database)
    after = tasks.get(task.id)
    assert after is not None and (after.status, after.runs, after.failures) == ("done", 1, 0)
    assert tasks.count_for_chat(task.chat.id) == 1  # the refused one was not stored


async def test_mnemo_tasks_list_and_cancel(rt: Runtime, config: Config, tmp_path: Path) -> None:
    task = extension_of(rt).schedule(turn_in(rt), "every monday at 8", "weekly review", "remind")
    extra = f'url = "{config.storage.url}"\n' if config.storage.url else ""
    path = write_config(tmp_path / "cli.toml", config.llm.base_url, config.storage.data_dir, extra)
    listed = run_mnemo(["tasks", "list", "--json"], path)
    assert listed.returncode == 0, listed.stderr
    [record] = json.loads(listed.stdout)["tasks"]
    assert (record["id"], record["chat"], record["expression"]) == (
        task.id, "terminal:t1", "0 8 * * mon"
    )  # fmt: skip
    cancelled = run_mnemo(["tasks", "cancel", str(task.id)], path)
    assert cancelled.returncode == 0 and "cancelled task" in cancelled.stdout
    again = run_mnemo(["tasks", "cancel", str(task.id)], path)
    assert again.returncode != 0 and f"no open task #{task.id}" in again.stderr
    assert "No scheduled tasks." in run_mnemo(["tasks", "list"], path).stdout


async def test_a_message_posted_while_another_process_holds_the_chat_goes_out_after(
    rt: Runtime,
) -> None:
    """The dispatcher waits for the chat's lease for a posted message as for a pending one
    (not until the next sweep, 30 s later)."""
    channel = RecordingChannel("terminal")
    rt.dispatcher.attach(channel)
    chat = rt.store.get_or_create_chat("terminal", "t1", "", "private")
    elsewhere = TurnLeases(rt.deliveries)  # another process's dispatcher
    held = elsewhere.try_claim(chat.id)
    assert held is not None
    posted = rt.deliveries.post(chat.id, Outbound("terminal", "t1", "hello"), "test:1")
    assert posted is not None
    assert rt.deliveries.post(chat.id, Outbound("terminal", "t1", "hello"), "test:1") is None
    rt.agent.outgoing.wake(chat.id)
    try:
        await asyncio.sleep(0.5)
        assert channel.sent == []  # the chat is the other process's
        rt.deliveries.release_turn(held)
        async with asyncio.timeout(3):
            while not channel.sent:  # noqa: ASYNC110 (the dispatcher fills it)
                await asyncio.sleep(0.02)
    finally:
        await rt.dispatcher.stop()
    assert channel.texts("t1") == ["hello"]
