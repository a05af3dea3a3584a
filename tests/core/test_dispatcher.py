"""The dispatcher: every message stored as it arrives, each chat's turns one at a time and
in order (across runtimes on one database too), replies delivered and retried, what a
stop or a crash left taken up at the next start, a full disk never called "saved". On both
engines: every runtime here opens `storage_url` (two runtimes: two PostgreSQL pools)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from bots.runtime import Runtime, build_runtime
from core import plugin as default_plugin
from core.api import Extension, Inbound, Outbound, TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, echo_responder
from core.config import Config
from core.turn.dispatcher import CRASH_REPLY, FULL_REPLY, NOT_STORED_FULL_REPLY, Dispatcher
from core.turn.hooks import Host
from tests.core.support import light_runtime, stored
from tests.fakes.channels import RecordingChannel

FAST_RETRIES = (0.01, 0.01, 0.01)


def said(text: str, chat_id: str = "c", message_id: str = "", respond: bool = True) -> Inbound:
    return Inbound("terminal", chat_id, text, message_id=message_id, respond=respond)


async def eventually(check: Callable[[], bool], within: float = 10) -> None:
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110 (the condition lives in another thread or the db)
            await asyncio.sleep(0.01)


def fast(runtime: Runtime) -> Runtime:
    """The runtime with a dispatcher that retries sends without waiting long."""
    runtime.dispatcher = Dispatcher(runtime.agent, retry_delays_s=FAST_RETRIES)
    return runtime


async def close(runtime: Runtime) -> None:
    """Stop the dispatcher's turns first: nothing may touch the database after `close`."""
    await runtime.dispatcher.stop()
    runtime.close()


@contextlib.asynccontextmanager
async def next_start(config: Config) -> AsyncIterator[tuple[Runtime, RecordingChannel]]:
    """The next process on the same database with a channel attached (not resumed yet);
    closed at the end."""
    second = fast(light_runtime(config))
    try:
        channel = RecordingChannel()
        second.dispatcher.attach(channel)
        yield second, channel
    finally:
        await close(second)


@pytest.fixture
def config(config: Config, storage_url: str) -> Config:
    config.storage.url = storage_url
    return config


def sqlite_only(runtime: Runtime) -> None:
    if runtime.storage.engine != "sqlite":
        pytest.skip("a SQLite page limit stands in for a full disk; PostgreSQL has no such knob")


@pytest.fixture
async def rt(config: Config) -> AsyncIterator[Runtime]:
    runtime = fast(light_runtime(config))
    yield runtime
    await close(runtime)


class Gate:
    """A model answer that waits until the test opens the gate (in the server's thread)."""

    def __init__(self) -> None:
        self.open = threading.Event()

    def __call__(self, request: dict[str, Any]) -> FakeReply:
        assert self.open.wait(10), "the test never opened the gate"
        return echo_responder(request)


async def test_fifty_chats_run_at_the_same_time(rt: Runtime, fake_llm: FakeOpenAIServer) -> None:
    everyone = threading.Barrier(50, timeout=10)

    def together(request: dict[str, Any]) -> FakeReply:
        everyone.wait()  # every chat's model call must be under way at once
        return echo_responder(request)

    fake_llm.responder = together
    replies = await asyncio.gather(*(rt.dispatcher(said("hi", f"chat{i}")) for i in range(50)))
    assert [reply.text if reply else None for reply in replies] == ["echo: hi"] * 50


async def test_turns_of_one_chat_run_one_at_a_time_in_order(rt: Runtime) -> None:
    replies = await asyncio.gather(*(rt.dispatcher(said(f"m{i}")) for i in range(20)))
    assert [reply.text if reply else None for reply in replies] == [
        f"echo: m{i}" for i in range(20)
    ]
    history = stored(rt, "c")
    assert history == [
        pair for i in range(20) for pair in (("user", f"m{i}"), ("assistant", f"echo: m{i}"))
    ]


async def test_a_message_waiting_behind_a_slow_turn_is_stored_at_once(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    gate = Gate()
    fake_llm.responder = gate
    first = asyncio.create_task(rt.dispatcher(said("one", message_id="1")))
    await eventually(lambda: len(fake_llm.requests) == 1)  # the first turn is with the model
    second = asyncio.create_task(rt.dispatcher(said("two", message_id="2")))
    await asyncio.sleep(0)  # the second message arrives (its handler starts)
    totals = rt.deliveries.delivery_totals()
    assert (totals.received, totals.pending) == (2, 2)
    assert stored(rt, "c") == [("user", "one")]  # the history keeps the turn order
    gate.open.set()
    replies = await asyncio.gather(first, second)
    assert [reply.text if reply else None for reply in replies] == ["echo: one", "echo: two"]
    assert rt.deliveries.delivery_totals().pending == 0


async def test_a_replayed_message_is_ignored(rt: Runtime, fake_llm: FakeOpenAIServer) -> None:
    first = await rt.dispatcher(said("hello", message_id="42"))
    again = await rt.dispatcher(said("hello", message_id="42"))
    elsewhere = await rt.dispatcher(said("hello", chat_id="other", message_id="42"))
    assert first is not None and first.text == "echo: hello"
    assert again is None  # no second answer
    assert elsewhere is not None  # message ids are unique per chat only
    assert stored(rt, "c") == [("user", "hello"), ("assistant", "echo: hello")]
    assert len(fake_llm.requests) == 2


class Crasher(Extension):
    """Crashes any turn whose message says "crash" (a bug in an extension)."""

    name = "crasher"

    async def intercept(self, turn: TurnContext) -> str | None:
        if "crash" in turn.inbound.text:
            raise ValueError("a bug")
        return None


class CrashPlugin:
    def register_commands(self, cli: object) -> None:
        pass

    def extension(self, host: Host) -> Extension:
        return Crasher()


async def test_a_crash_becomes_an_error_reply_and_the_message_stays_saved(config: Config) -> None:
    runtime = fast(build_runtime(config, plugins=[default_plugin, CrashPlugin()]))  # type: ignore[list-item]
    try:
        crashed = await runtime.dispatcher(said("please crash", message_id="7"))
        fine = await runtime.dispatcher(said("and now?", message_id="8"))
        quiet = await runtime.dispatcher(said("crash, unaddressed", message_id="9", respond=False))
    finally:
        history = stored(runtime, "c")
        totals = runtime.deliveries.delivery_totals()
        await close(runtime)
    assert crashed is not None and crashed.is_error and crashed.reply_to == "7"
    assert crashed.text == CRASH_REPLY  # it says "saved": the message is in the history
    assert ("user", "please crash") in history
    assert fine is not None and fine.text == "echo: and now?"
    assert quiet is None
    assert (totals.answered, totals.recorded, totals.pending) == (2, 1, 0)


async def test_typing_shows_only_while_a_turn_runs(rt: Runtime, fake_llm: FakeOpenAIServer) -> None:
    channel = RecordingChannel()
    rt.dispatcher.attach(channel)
    gate = Gate()
    fake_llm.responder = gate
    waiting = [asyncio.create_task(rt.dispatcher(said(f"m{i}"))) for i in range(5)]
    waiting.append(asyncio.create_task(rt.dispatcher(said("aside", respond=False))))
    await eventually(lambda: len(fake_llm.requests) == 1)
    assert channel.typing_now == 1  # the running turn only, not the four queued behind it
    gate.open.set()
    assert await asyncio.gather(*waiting) == [None] * 6  # replies went out through the channel
    assert channel.typing_peak == 1
    assert len(channel.typing_started) == 5  # one per answered turn, none for the aside
    assert channel.texts() == [f"echo: m{i}" for i in range(5)]


async def test_a_failed_send_is_retried_and_recorded(rt: Runtime) -> None:
    channel = RecordingChannel()
    rt.dispatcher.attach(channel)
    channel.fail_next(2)
    await rt.dispatcher(said("hello"))
    assert channel.texts() == ["echo: hello"]
    assert len(channel.failed) == 2
    totals = rt.deliveries.delivery_totals()
    assert (totals.replies, totals.delivered, totals.failed_attempts) == (1, 1, 2)


class ReceivesWhileFailing(RecordingChannel):
    """Fails every send until the last failing one, during which a new message arrives:
    the chat's worker is still running when it is received."""

    def __init__(self, dispatcher: Dispatcher, failures: int, arriving: Inbound) -> None:
        super().__init__()
        self.fail_next(failures)
        self._dispatcher = dispatcher
        self._arriving = arriving
        self.answer: asyncio.Future[Any] | None = None

    async def send(self, message: Outbound) -> None:
        if self._failures == 1 and self.answer is None:  # the last send that fails
            self.answer = self._dispatcher.receive(self._arriving)
        await super().send(message)


async def test_a_message_arriving_after_a_failed_delivery_retries_it_at_once(
    rt: Runtime,
) -> None:
    attempts = 1 + len(FAST_RETRIES)
    channel = ReceivesWhileFailing(rt.dispatcher, attempts, said("second"))
    rt.dispatcher.attach(channel)
    await rt.dispatcher(said("first"))  # all of its sends fail; "second" came in meanwhile
    assert channel.answer is not None
    await asyncio.wait_for(channel.answer, 10)
    assert channel.texts() == ["echo: first", "echo: second"]  # no wait for a sweep
    assert len(channel.failed) == attempts


async def test_undelivered_replies_go_out_after_a_restart(config: Config) -> None:
    first = fast(light_runtime(config))
    down = RecordingChannel()
    first.dispatcher.attach(down)
    down.fail_next(100)  # the platform is unreachable for this whole run
    await first.dispatcher(said("one"))
    await first.dispatcher(said("two"))
    await first.dispatcher.stop()
    totals = first.deliveries.delivery_totals()
    assert (totals.answered, totals.delivered, totals.failed_attempts) == (2, 0, 8)
    assert down.sent == []
    await close(first)

    async with next_start(config) as (second, up):
        assert len(second.dispatcher.resume()) == 1
        await eventually(lambda: len(up.sent) == 2)
        await second.dispatcher.stop()
        totals = second.deliveries.delivery_totals()
    assert up.texts() == ["echo: one", "echo: two"]  # each once, in order
    assert (totals.replies, totals.delivered) == (2, 2)


async def test_a_stop_keeps_waiting_messages_for_the_next_start(
    config: Config, fake_llm: FakeOpenAIServer
) -> None:
    first = fast(light_runtime(config))
    channel = RecordingChannel()
    first.dispatcher.attach(channel)
    gate = Gate()
    fake_llm.responder = gate
    handlers = [asyncio.create_task(first.dispatcher(said(f"m{i}"))) for i in range(5)]
    await eventually(lambda: len(fake_llm.requests) == 1)
    stopping = asyncio.create_task(first.dispatcher.stop(grace_s=5))
    await asyncio.sleep(0.05)
    assert all(task.done() for task in handlers[1:])  # the queued ones are handed back now
    gate.open.set()  # the running turn finishes within the grace period
    await stopping
    assert await asyncio.gather(*handlers) == [None] * 5
    assert channel.texts() == ["echo: m0"]
    assert first.deliveries.delivery_totals().pending == 4
    await close(first)

    async with next_start(config) as (second, again):
        second.dispatcher.resume()
        await eventually(lambda: len(again.sent) == 4)
        await second.dispatcher.stop()
        history = stored(second, "c")
    assert again.texts() == [f"echo: m{i}" for i in range(1, 5)]
    assert history == [
        pair for i in range(5) for pair in (("user", f"m{i}"), ("assistant", f"echo: m{i}"))
    ]


async def test_a_turn_cut_by_the_grace_period_is_answered_once_at_the_next_start(
    config: Config, fake_llm: FakeOpenAIServer
) -> None:
    first = fast(light_runtime(config))
    first.dispatcher.attach(RecordingChannel())
    gate = Gate()
    fake_llm.responder = gate
    handler = asyncio.create_task(first.dispatcher(said("slow one")))
    await eventually(lambda: len(fake_llm.requests) == 1)
    await first.dispatcher.stop(grace_s=0.1)  # the model is still thinking: cancelled
    assert await handler is None
    await close(first)
    gate.open.set()

    async with next_start(config) as (second, channel):
        second.dispatcher.resume()
        await eventually(lambda: len(channel.sent) == 1)
        await second.dispatcher.stop()
        history = stored(second, "c")
    assert channel.texts() == ["echo: slow one"]
    assert history == [("user", "slow one"), ("assistant", "echo: slow one")]  # stored once


async def test_a_full_disk_is_never_called_saved(rt: Runtime) -> None:
    sqlite_only(rt)
    channel = RecordingChannel()
    rt.dispatcher.attach(channel)
    await rt.dispatcher(said("a first message, stored"))
    pages = rt.conn.execute("PRAGMA page_count").fetchone()[0]
    rt.conn.execute(f"PRAGMA max_page_count = {pages}")  # the database file cannot grow
    await rt.dispatcher(said("x" * 20_000, message_id="99"))
    rt.conn.execute("PRAGMA max_page_count = 1073741823")
    assert channel.texts() == ["echo: a first message, stored", NOT_STORED_FULL_REPLY]
    assert channel.sent[-1].is_error and channel.sent[-1].reply_to == "99"
    assert rt.deliveries.delivery_totals().received == 1  # nothing of it was stored
    await rt.dispatcher(said("room again", message_id="99"))  # not taken for a replay
    assert channel.texts()[-1] == "echo: room again"


async def test_a_disk_that_fills_during_the_turn_says_saved_because_it_was(rt: Runtime) -> None:
    sqlite_only(rt)
    channel = RecordingChannel()
    rt.dispatcher.attach(channel)
    assert rt.agent.accept(said("y" * 20_000, message_id="5")) is not None  # stored on arrival
    pages = rt.conn.execute("PRAGMA page_count").fetchone()[0]
    rt.conn.execute(f"PRAGMA max_page_count = {pages}")  # full before its turn starts
    rt.dispatcher.resume()
    await eventually(lambda: bool(channel.sent))
    await rt.dispatcher.stop()
    rt.conn.execute("PRAGMA max_page_count = 1073741823")
    assert channel.texts() == [FULL_REPLY]  # "saved": the message is in the inbox
    assert rt.deliveries.delivery_totals().received == 1


async def test_commands_and_unaddressed_messages_are_never_answered_again(
    config: Config, fake_llm: FakeOpenAIServer
) -> None:
    first = fast(light_runtime(config))
    help_text = await first.dispatcher(said("/help", message_id="1"))
    quiet = await first.dispatcher(said("just chatting", message_id="2", respond=False))
    assert help_text is not None and quiet is None
    await close(first)
    async with next_start(config) as (second, channel):
        assert second.dispatcher.resume() == []
        totals = second.deliveries.delivery_totals()
    assert channel.sent == [] and fake_llm.requests == []
    assert (totals.answered, totals.recorded, totals.pending) == (1, 1, 0)


async def test_two_runtimes_on_one_database_never_interleave_a_chat(
    config: Config, fake_llm: FakeOpenAIServer
) -> None:
    def slow_echo(request: dict[str, Any]) -> FakeReply:
        reply = echo_responder(request)
        reply.delay_s = 0.05
        return reply

    fake_llm.responder = slow_echo
    runtimes = [fast(light_runtime(config)), fast(light_runtime(config))]
    channels = [RecordingChannel(), RecordingChannel()]
    try:
        for runtime, channel in zip(runtimes, channels, strict=True):
            runtime.dispatcher.attach(channel)
        sends = [runtimes[i % 2].dispatcher(said(f"m{i}", message_id=str(i))) for i in range(12)]
        await asyncio.gather(*sends)
        history = stored(runtimes[0], "c")
        delivered = [*channels[0].texts(), *channels[1].texts()]
    finally:
        for runtime in runtimes:
            await close(runtime)
    assert len(history) == 24
    for user, assistant in zip(history[::2], history[1::2], strict=True):
        assert user[0] == "user" and assistant == ("assistant", f"echo: {user[1]}")
    assert sorted(delivered) == sorted(f"echo: m{i}" for i in range(12))  # each exactly once
    assert len(fake_llm.requests) == 12  # one turn per message: never two processes on one


async def test_a_turn_inside_which_the_server_drops_the_connection_is_answered_once(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    """PostgreSQL: the server (or the network) drops the bot's connections while a turn is
    with the model. The turn's writes go to a fresh connection, all together, once."""
    if rt.storage.engine != "postgresql":
        pytest.skip("a server that drops connections: PostgreSQL only")
    import psycopg

    gate = Gate()
    fake_llm.responder = gate
    turn = asyncio.create_task(rt.dispatcher(said("hello", message_id="1")))
    await eventually(lambda: len(fake_llm.requests) == 1)  # stored, now with the model
    with psycopg.connect(rt.storage.database.pg.url, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    assert killed, "the pool held at least one connection"
    gate.open.set()
    reply = await turn
    assert reply is not None and reply.text == "echo: hello"
    assert stored(rt, "c") == [("user", "hello"), ("assistant", "echo: hello")]
    totals = rt.deliveries.delivery_totals()
    assert (totals.answered, totals.pending, totals.replies) == (1, 0, 1)
