"""The dashboard's chat page: a channel of its own (`web:<name>` chats) whose replies stream
to the page as server-sent events, behind the dashboard's token, session and CSRF rules.
Served for real (uvicorn inside the test's loop) so the events are seen as they arrive."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bots.runtime import Runtime
from bots.web.chat import WebChatChannel
from bots.web.extension import WebExtension
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from tests.bots.web.conftest import CSRF, server_sent_events
from tests.bots.web.test_browser import CHROMEDRIVER, CHROMIUM, Browser, chromium

TOKEN = "chat-token-0123456789abcdef0123"


@dataclass
class Served:
    url: str
    runtime: Runtime
    channel: WebChatChannel

    def history(self, name: str) -> list[tuple[str, str]]:
        chat = self.runtime.store.find_chat("web", name)
        assert chat is not None
        return [(m.role, m.content) for m in self.runtime.store.history(chat.id)]


@pytest.fixture
async def served(runtime: Runtime) -> AsyncIterator[Served]:
    [web] = [e for e in runtime.extensions if isinstance(e, WebExtension)]
    web.token = TOKEN
    channel = web.chat_channel()
    runtime.dispatcher.attach(channel)  # as `mnemo run` and `mnemo web` do
    channel.bind(runtime.dispatcher)
    service = web.service("127.0.0.1", 0)
    url = service.bind()
    serving = asyncio.create_task(service.run())
    try:
        yield Served(url, runtime, channel)
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving


async def logged_in(client: httpx.AsyncClient, url: str) -> str:
    """Log in as the page does; the session's CSRF token."""
    answer = await client.post("/login", data={"token": TOKEN, "next": "/chat/demo"},
                               headers={"Origin": url})  # fmt: skip
    assert answer.status_code == 303, answer.text
    page = await client.get("/chat/demo")
    found = CSRF.search(page.text)
    assert page.status_code == 200 and found is not None
    return found.group(1)


async def read_events(response: httpx.Response) -> list[tuple[float, str, str]]:
    """(arrival time, event, text) of each server-sent event, as they arrive."""
    return [
        (at, event, json.loads(data)["text"])
        async for at, event, data in server_sent_events(response)
    ]


async def test_a_message_is_stored_and_its_reply_streams_as_it_grows(
    served: Served, fake_llm: FakeOpenAIServer
) -> None:
    words = " ".join(f"word{i}" for i in range(24))
    fake_llm.add(FakeReply(content=words, tokens_per_s=30))
    async with httpx.AsyncClient(base_url=served.url) as client:
        csrf = await logged_in(client, served.url)
        form = {"csrf": csrf, "text": "count for me"}
        headers = {"Origin": served.url}
        async with client.stream("POST", "/chat/demo", data=form, headers=headers) as answer:
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith("text/event-stream")
            events = await read_events(answer)
    kinds = [kind for _, kind, _ in events]
    assert kinds[-1] == "reply" and events[-1][2] == words
    partials = [(at, text) for at, kind, text in events if kind == "partial"]
    assert len(partials) >= 3 and all(words.startswith(text) for _, text in partials)
    assert events[-1][0] - partials[0][0] > 0.3  # the first words came well before the end
    assert served.history("demo") == [("user", "count for me"), ("assistant", words)]
    assert fake_llm.requests[-1].get("stream") is True


async def test_the_chat_page_needs_a_session_its_csrf_token_and_the_same_origin(
    served: Served, fake_llm: FakeOpenAIServer
) -> None:
    async with httpx.AsyncClient(base_url=served.url) as client:
        away = await client.get("/chat/demo")
        assert away.status_code == 303 and away.headers["location"].startswith("/login")
        anonymous = await client.post("/chat/demo", data={"text": "hi"},
                                      headers={"Origin": served.url})  # fmt: skip
        assert anonymous.status_code == 401
        csrf = await logged_in(client, served.url)
        no_csrf = await client.post("/chat/demo", data={"text": "hi"},
                                    headers={"Origin": served.url})  # fmt: skip
        assert no_csrf.status_code == 403
        foreign = await client.post("/chat/demo", data={"csrf": csrf, "text": "hi"},
                                    headers={"Origin": "http://evil.example"})  # fmt: skip
        assert foreign.status_code == 403
        bad_name = await client.post("/chat/no%20spaces", data={"csrf": csrf, "text": "hi"},
                                     headers={"Origin": served.url})  # fmt: skip
        assert bad_name.status_code == 404
        empty = await client.post("/chat/demo", data={"csrf": csrf, "text": "  "},
                                  headers={"Origin": served.url})  # fmt: skip
        assert empty.status_code == 422
    # A script with the bearer token needs no session (and so no CSRF token).
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=served.url, headers=bearer) as script:
        answer = await script.post("/chat/ops", data={"text": "hello"})
        assert answer.status_code == 200 and "event: reply" in answer.text
    assert served.runtime.store.find_chat("web", "demo") is None  # nothing got through
    assert served.history("ops") == [("user", "hello"), ("assistant", "echo: hello")]


async def test_the_header_links_to_the_chat_page_when_it_is_served(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url) as client:
        await logged_in(client, served.url)
        page = await client.get("/")
    assert page.status_code == 200 and 'href="/chat"' in page.text


async def test_a_command_is_answered_on_the_page(served: Served) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=served.url, headers=bearer) as script:
        remembered = await script.post("/chat/ops", data={"text": "remember: the cat is Miso"})
        assert "Noted." in remembered.text
        listed = await script.post("/chat/ops", data={"text": "/memory"})
    events = [line for line in listed.text.splitlines() if line.startswith("event: ")]
    assert events == ["event: reply"] and "the cat is Miso" in listed.text


@pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()), reason="Chromium is not installed"
)
async def test_chatting_in_a_browser_shows_the_reply_growing(
    served: Served, fake_llm: FakeOpenAIServer, tmp_path: Path
) -> None:
    words = " ".join(f"word{i}" for i in range(30))
    fake_llm.add(FakeReply(content=words, tokens_per_s=20))
    driver = await asyncio.to_thread(chromium, tmp_path / "chromium-profile")
    browser = Browser(driver, served.url, tmp_path)
    try:
        await browser.open("/login?next=/chat/demo")
        await browser.type("input[name=token]", TOKEN)
        await browser.click("button[type=submit]")
        await browser.until("web:demo")
        await browser.type("#chat-text", "count to thirty")
        await browser.click("#chat-send")
        growing = await browser.until("word3")
        assert "word29" not in growing  # seen while it grows, not only at the end
        await browser.until("word29")
        await browser.open("/chat/demo")  # the history holds the same reply
        page = await browser.until("word29")
        assert "count to thirty" in page
    finally:
        await asyncio.to_thread(driver.quit)
        shutil.rmtree(tmp_path / "chromium-profile", ignore_errors=True)
    assert served.history("demo")[-1] == ("assistant", words)
