"""The live turn (`core.turn.live`, `live_turns`, m0024): one row per chat, overwritten by
the next turn, written only by the turn that owns it, bounded and throttled; a running row
whose process is gone reads as stopped. The store runs on both engines (`storage`)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.config import Config
from core.model.completion import ToolCall
from core.storage.engine import Storage
from core.storage.live_turn_store import DatabaseLiveTurnStore, LiveTurnKey
from core.storage.stores import delivery_store, live_turn_store, session_store
from core.turn import live as live_module
from core.turn.live import REPLY_CHARS, STALE_S, TOOL_CALLS_KEPT, LiveTurn, live_view
from tests.core.support import dispatching_runtime, stored
from tests.fakes.channels import StreamingRecordingChannel

HERE = socket.gethostname()
DEAD = f"{HERE}:999999999:dead"  # no process has this pid


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def new_chat(storage: Storage, name: str = "c") -> int:
    return session_store(storage).get_or_create_chat("terminal", name, None, "private").id


def test_a_turn_is_written_as_it_goes_and_only_by_its_owner(storage: Storage) -> None:
    store = live_turn_store(storage)
    chat_id = new_chat(storage)
    mine, theirs = LiveTurnKey(chat_id, "a", 1), LiveTurnKey(chat_id, "b", 2)
    store.begin(mine, 10.0)
    assert store.set_request(mine, {"tokens": 12, "last": []}, 11.0)
    assert store.set_reply(mine, "Hel", 12.0)
    assert store.set_tools(mine, [{"name": "t", "result": None}], 13.0)
    row = store.get(chat_id)
    assert row is not None
    assert (row.state, row.request["tokens"], row.reply, row.rounds) == ("running", 12, "Hel", 1)
    assert row.tools == [{"name": "t", "result": None}] and row.updated_at == 13.0
    store.begin(theirs, 20.0)  # the chat's next turn (here another process's) overwrites it
    assert not store.set_reply(mine, "late", 21.0)
    assert not store.finish(mine, "done", "late", 21.0)
    row = store.get(chat_id)
    assert row is not None and (row.owner, row.inbound_id, row.reply) == ("b", 2, "")
    assert store.finish(theirs, "done", "Hello", 22.0)
    row = store.get(chat_id)
    assert row is not None and (row.state, row.reply) == ("done", "Hello")
    assert row.finished_at


def test_a_running_turn_whose_process_is_gone_reads_as_stopped(storage: Storage) -> None:
    store, deliveries = live_turn_store(storage), delivery_store(storage)
    clock = Clock()
    dead, held, quiet = new_chat(storage, "dead"), new_chat(storage, "held"), new_chat(storage, "q")
    store.begin(LiveTurnKey(dead, DEAD, 1), clock.now)
    view = live_view(store, deliveries, dead, clock)
    assert view is not None and view.state == "stopped"
    # A process on another machine: alive while it holds the chat's lease or writes.
    store.begin(LiveTurnKey(held, "elsewhere:1:x", 1), clock.now - 2 * STALE_S)
    assert deliveries.claim_turn(held, "elsewhere:1:x", clock.now + 20, clock.now)
    view = live_view(store, deliveries, held, clock)
    assert view is not None and view.state == "running"
    store.begin(LiveTurnKey(quiet, "elsewhere:1:x", 1), clock.now - 10)
    view = live_view(store, deliveries, quiet, clock)
    assert view is not None and view.state == "running"
    clock.now += STALE_S
    view = live_view(store, deliveries, quiet, clock)
    assert view is not None and view.state == "stopped"
    assert live_view(store, deliveries, new_chat(storage, "none"), clock) is None


async def test_the_growing_text_is_throttled_and_everything_is_bounded(storage: Storage) -> None:
    store = live_turn_store(storage)
    chat_id, clock = new_chat(storage), Clock()
    live = LiveTurn(store, LiveTurnKey(chat_id, "a", 1), clock)
    await live.text("not started")  # nothing is written before the model is asked
    assert store.get(chat_id) is None
    live.request({"tokens": 1})
    for n in range(1, 6):
        clock.now += 0.1
        await live.text("x" * n)
    row = store.get(chat_id)
    assert row is not None and row.reply == "xxxxx"  # the one written at 0.5 s
    clock.now += 0.1
    await live.text("xxxxxx")
    row = store.get(chat_id)
    assert row is not None and row.reply == "xxxxx"  # too soon after it
    live.tool_calls([ToolCall(f"c{n}", "t", "a" * 10_000) for n in range(TOOL_CALLS_KEPT + 5)])
    live.tool_results([{"role": "tool", "tool_call_id": "c24", "content": "r" * 10_000}])
    live.finish("done", "y" * (REPLY_CHARS * 3))
    row = store.get(chat_id)
    assert row is not None and row.state == "done" and len(row.reply) == REPLY_CHARS
    assert len(row.tools) == TOOL_CALLS_KEPT and row.tools[0]["id"] == "c5"
    assert all(len(t["arguments"]) <= live_module.ARGUMENT_CHARS for t in row.tools)
    assert len(row.tools[-1]["result"]) <= live_module.RESULT_CHARS


class BrokenStore(DatabaseLiveTurnStore):
    """A live store whose every write fails, as a full or lost database would."""

    def begin(self, key: LiveTurnKey, now: float) -> None:
        raise OSError("disk full")


@pytest.fixture
async def rt(config: Config) -> AsyncIterator[Runtime]:
    async with dispatching_runtime(config) as runtime:
        yield runtime


def row_of(runtime: Runtime, chat: str) -> Any:
    found = runtime.store.find_chat("terminal", chat)
    assert found is not None and runtime.agent.live is not None
    return runtime.agent.live.get(found.id)


async def test_a_streamed_turn_leaves_its_request_tools_and_final_reply(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    channel = StreamingRecordingChannel()
    rt.dispatcher.attach(channel)
    seen: list[Any] = []
    show = channel.show_partial

    async def show_and_look(message: Any) -> None:
        await show(message)
        seen.append(row_of(rt, "s"))

    channel.show_partial = show_and_look  # type: ignore[method-assign]
    fake_llm.add(
        FakeReply("Looking.", tool_calls=[tool_call("no_such_tool", {"q": "tea"}, "c1")]),
        FakeReply("Tea is a drink made from leaves."),
    )
    await rt.dispatcher(Inbound("terminal", "s", "what is tea?", message_id="1"))
    assert seen and all(row.state == "running" for row in seen)
    row = row_of(rt, "s")
    assert row.state == "done" and row.rounds == 2
    assert row.reply == channel.texts()[-1] == stored(rt, "s")[-1][1]
    [call] = row.tools
    assert (call["name"], call["arguments"]) == ("no_such_tool", '{"q": "tea"}')
    assert "no_such_tool" in call["result"]
    assert row.request["window"] > row.request["tokens"] > 0
    assert row.request["last"][-1]["role"] == "tool"
    assert row.request["last"][0]["text"].startswith("what is tea?") or any(
        m["text"].startswith("what is tea?") for m in row.request["last"]
    )


async def test_a_failed_turn_is_marked_failed_and_a_broken_live_store_costs_nothing(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(FakeReply(status=500, error="boom"))
    reply = await rt.agent.handle(Inbound("terminal", "f", "hi", message_id="1"))
    assert reply is not None and reply.is_error
    assert row_of(rt, "f").state == "failed"
    rt.agent.live = BrokenStore(rt.storage.database)
    fake_llm.add(FakeReply("Still here."))
    reply = await rt.agent.handle(Inbound("terminal", "f", "again", message_id="2"))
    assert reply is not None and reply.text == "Still here."
