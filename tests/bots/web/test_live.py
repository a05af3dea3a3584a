"""The inspector's live turn: a turn taken by one process (`mnemo run`: the test's runtime)
shows in the dashboard of another (`mnemo web`: a second runtime on the same database,
served for real): the request, the reply growing, the tool call, then the finished turn.
Behind the dashboard's session like every page, and escaped. On both engines."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from bots.runtime import Runtime, build_runtime
from bots.web.extension import WebExtension
from core.api import Chat, Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.config import Config
from core.storage.stores import delivery_store, live_turn_store
from core.turn.live import live_view
from tests.bots.web.conftest import ON_BOTH_ENGINES, server_sent_events
from tests.fakes.channels import StreamingRecordingChannel

pytestmark = ON_BOTH_ENGINES
TOKEN = "live-token-0123456789abcdef0123"
SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"


@dataclass
class Dashboard:
    """`mnemo web` on its own runtime (its own connections to the bot's database)."""

    url: str
    runtime: Runtime


@pytest.fixture
async def web(config: Config) -> AsyncIterator[Dashboard]:
    reader = build_runtime(config)
    [extension] = [e for e in reader.extensions if isinstance(e, WebExtension)]
    extension.token = TOKEN
    service = extension.service("127.0.0.1", 0)
    url = service.bind()
    serving = asyncio.create_task(service.run())
    try:
        yield Dashboard(url, reader)
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        reader.close()


async def log_in(client: httpx.AsyncClient, url: str) -> None:
    answer = await client.post("/login", data={"token": TOKEN, "next": "/"},
                               headers={"Origin": url})  # fmt: skip
    assert answer.status_code == 303, answer.text


async def turn_running(web: Dashboard, chat: Chat) -> None:
    """Wait until the dashboard's process sees the other process's turn running."""
    store, deliveries = live_turn_store(web.runtime.storage), delivery_store(web.runtime.storage)
    for _ in range(200):
        view = live_view(store, deliveries, chat.id)
        if view is not None and view.state == "running":
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the turn never showed as running")


async def turn_events(response: httpx.Response) -> list[tuple[float, dict[str, Any]]]:
    return [
        (at, json.loads(data))
        async for at, event, data in server_sent_events(response)
        if event == "turn"
    ]


async def test_a_turn_of_another_process_shows_live_then_finished(
    runtime: Runtime, web: Dashboard, fake_llm: FakeOpenAIServer
) -> None:
    channel = StreamingRecordingChannel()
    runtime.dispatcher.attach(channel)
    await runtime.dispatcher(Inbound("terminal", "live", "hello", message_id="1"))
    chat = runtime.store.find_chat("terminal", "live")
    assert chat is not None
    words = " ".join(f"word{i}" for i in range(30)) + " " + IMG
    fake_llm.add(
        FakeReply(tool_calls=[tool_call("no_such_tool", {"q": SCRIPT}, "c1")]),
        FakeReply(content=words, tokens_per_s=20),
    )
    turn = asyncio.create_task(
        runtime.dispatcher(Inbound("terminal", "live", "count " + SCRIPT, message_id="2"))
    )
    async with httpx.AsyncClient(base_url=web.url) as client:
        await log_in(client, web.url)
        await turn_running(web, chat)
        async with client.stream("GET", f"/chats/{chat.id}/live/events") as answer:
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith("text/event-stream")
            events = await turn_events(answer)
        await turn
        page = await client.get(f"/chats/{chat.id}/live")
    final = channel.texts()[-1]
    assert final == words == runtime.store.history(chat.id)[-1].content
    states = [event["state"] for _, event in events]
    assert states[0] == "running" and states[-1] == "done"
    growing = [e["reply"] for _, e in events if e["state"] == "running" and e["reply"]]
    assert len(growing) >= 2 and all(final.startswith(text) for text in growing)
    assert growing[0] != final
    first_text = next(at for at, e in events if e["reply"])
    assert events[-1][0] - first_text > 0.3  # shown as it grew, not at the end
    last = events[-1][1]
    assert last["reply"] == final and last["rounds"] == 2
    [call] = last["tools"]
    assert call["name"] == "no_such_tool" and SCRIPT in call["arguments"] and call["result"]
    assert last["request"]["tokens"] > 0 and last["request"]["messages"] >= 3
    # The page escapes what the model and the user wrote.
    assert page.status_code == 200 and 'id="live-state">done<' in page.text
    assert SCRIPT not in page.text and IMG not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "&lt;img src=x onerror=alert(1)&gt;" in page.text


async def test_the_live_turn_needs_a_session(runtime: Runtime, web: Dashboard) -> None:
    await runtime.dispatcher(Inbound("terminal", "live", "hello", message_id="1"))
    chat = runtime.store.find_chat("terminal", "live")
    assert chat is not None
    async with httpx.AsyncClient(base_url=web.url) as client:
        for path in (f"/chats/{chat.id}/live", f"/chats/{chat.id}/live/events"):
            away = await client.get(path)
            assert away.status_code == 303 and away.headers["location"].startswith("/login")
        await log_in(client, web.url)
        missing = await client.get("/chats/999999/live/events")
        assert missing.status_code == 404
        finished = await client.get(f"/chats/{chat.id}/live/events")
    # A finished turn: its state once, then the stream ends (the browser reconnects).
    assert finished.status_code == 200 and finished.text.count("event: turn") == 1
    assert '"state": "done"' in finished.text and "retry: " in finished.text
