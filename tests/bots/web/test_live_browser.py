"""The live turn in a real browser: `/static/live.js` follows the server-sent events and
shows the reply growing, then the finished turn, with what the model wrote as text only."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from pathlib import Path

import pytest

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from tests.bots.web.test_browser import CHROMEDRIVER, CHROMIUM, Browser, chromium
from tests.bots.web.test_live import IMG, TOKEN, Dashboard, turn_running, web
from tests.fakes.channels import StreamingRecordingChannel

__all__ = ["web"]  # the fixture, from the cross-process test


@pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()), reason="Chromium is not installed"
)
async def test_the_live_page_shows_the_turn_growing_in_a_browser(
    runtime: Runtime, web: Dashboard, fake_llm: FakeOpenAIServer, tmp_path: Path
) -> None:
    runtime.dispatcher.attach(StreamingRecordingChannel())
    await runtime.dispatcher(Inbound("terminal", "live", "hello", message_id="1"))
    chat = runtime.store.find_chat("terminal", "live")
    assert chat is not None
    words = " ".join(f"word{i}" for i in range(40))
    driver = await asyncio.to_thread(chromium, tmp_path / "chromium-profile")
    browser = Browser(driver, web.url, tmp_path)
    try:
        await browser.open(f"/login?next=/chats/{chat.id}/live")
        await browser.type("input[name=token]", TOKEN)
        await browser.click("button[type=submit]")
        await browser.until("Live turn")
        fake_llm.add(
            FakeReply(tool_calls=[tool_call("no_such_tool", {"q": IMG}, "c1")]),
            FakeReply(content=words + " " + IMG, tokens_per_s=15),
        )
        said = Inbound("terminal", "live", "count", message_id="2")
        turn = asyncio.create_task(runtime.dispatcher(said))
        await turn_running(web, chat)
        growing = await browser.until("word3")
        assert "word39" not in growing  # seen while it grows, not only at the end
        await turn
        page = await browser.until(IMG)  # the reply's end
        for _ in range(100):  # and the turn's state, from its last event
            with contextlib.suppress(Exception):  # redrawn between finding and reading
                state = await browser.find("#live h2 .state")
                if await browser.call(getattr, state, "text") == "done":
                    break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the page never showed the turn done")
        page = await browser.text()
        assert "word39" in page and IMG in page and "no_such_tool(" in page
        images = await browser.call(driver.find_elements, "css selector", "#live img")
        assert images == []  # the model's markup is text, never an element
    finally:
        await asyncio.to_thread(driver.quit)
        shutil.rmtree(tmp_path / "chromium-profile", ignore_errors=True)
