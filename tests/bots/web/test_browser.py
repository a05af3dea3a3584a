"""End to end in a real browser: Debian's Chromium driven by Selenium against the dashboard
served inside the bot's own event loop (as `mnemo run` serves it).

Log in, find a memory by asking what the bot would recall, correct it, and see the next
model request carry the correction; forget another and see a reflector pass, offered the
same fact by the model, not learn it again. Every page is photographed on the way
(`MNEMO_WEB_SHOTS=DIR` keeps the pictures; else they go to the test's tmp dir).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from bots.runtime import Runtime
from bots.web.extension import WebExtension
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from reflector.extension import ReflectorExtension
from tests.bots.web.conftest import say
from tests.bots.web.test_actions import newest_block

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,900",
)

pytestmark = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="Chromium is not installed (Debian: apt-get install chromium chromium-driver)",
)


class Browser:
    """A Chromium session whose blocking calls run off the event loop serving the app."""

    def __init__(self, driver: Any, url: str, shots: Path) -> None:
        self.driver = driver
        self.url = url
        self.shots = shots

    async def call(self, function: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(function, *args)

    async def open(self, path: str) -> None:
        await self.call(self.driver.get, self.url + path)

    async def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return await self.call(self.driver.find_element, By.CSS_SELECTOR, css)

    async def text(self) -> str:
        body = await self.find("body")
        return str(await self.call(lambda: body.text))

    async def click(self, css: str) -> None:
        element = await self.find(css)
        await self.call(element.click)

    async def until(self, text: str, timeout_s: float = 10.0) -> str:
        """The page's text once it shows `text` (a click's navigation has landed)."""
        for _ in range(int(timeout_s / 0.1)):
            with contextlib.suppress(Exception):  # the page may be between documents
                page = await self.text()
                if text in page:
                    return page
            await asyncio.sleep(0.1)
        raise AssertionError(f"{text!r} not on {self.driver.current_url}:\n{await self.text()}")

    async def type(self, css: str, text: str, clear: bool = False) -> None:
        element = await self.find(css)
        if clear:
            await self.call(element.clear)
        await self.call(element.send_keys, text)

    async def shoot(self, name: str) -> None:
        """A picture of the whole page, beyond the window (Chrome DevTools' capture)."""
        metrics = await self.call(self.driver.execute_cdp_cmd, "Page.getLayoutMetrics", {})
        height = min(int(metrics["cssContentSize"]["height"]), 6000)
        clip = {"x": 0, "y": 0, "width": 1280, "height": height, "scale": 1}
        shot = await self.call(
            self.driver.execute_cdp_cmd,
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True, "clip": clip},
        )
        (self.shots / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))


def chromium(profile: Path) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))


@pytest.fixture
async def browser(runtime: Runtime, tmp_path: Path) -> AsyncIterator[Browser]:
    [web] = [e for e in runtime.extensions if isinstance(e, WebExtension)]
    web.token = "browser-token-0123456789abcdef"
    service = web.service("127.0.0.1", 0)
    url = service.bind()
    serving = asyncio.create_task(service.run())
    shots = Path(os.environ.get("MNEMO_WEB_SHOTS") or tmp_path / "shots")
    await asyncio.to_thread(shots.mkdir, parents=True, exist_ok=True)
    driver = await asyncio.to_thread(chromium, tmp_path / "chromium-profile")
    try:
        yield Browser(driver, url, shots)
    finally:
        await asyncio.to_thread(driver.quit)
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        shutil.rmtree(tmp_path / "chromium-profile", ignore_errors=True)


def reflector_offers(*facts: str) -> FakeReply:
    memories = [{"content": fact, "category": "PROFILE"} for fact in facts]
    return FakeReply(content=json.dumps({"memories": memories}))


async def test_find_edit_and_forget_a_memory_in_the_browser(
    runtime: Runtime, fake_llm: FakeOpenAIServer, browser: Browser
) -> None:
    await say(runtime, "ann", "remember: my cat is called Miso", "Ann")
    await say(runtime, "ann", "remember: my sister lives in Porto", "Ann")
    await say(runtime, "ann", "what is my cat called?", "Ann")
    await say(runtime, "ann", "I drink green tea daily, by the way", "Ann")
    await say(runtime, "bob", "remember: my cat is called Felix", "Bob")
    ann = runtime.store.find_chat("terminal", "ann")
    assert ann is not None

    # Log in: every page sends a stranger to the login form first.
    await browser.open("/")
    assert "/login" in browser.driver.current_url
    await browser.shoot("01-login")
    await browser.type("#token", "browser-token-0123456789abcdef")
    await browser.click("form button[type=submit]")
    await browser.until("last activity")
    await browser.shoot("02-chats")

    # Find the memory as the bot would: ask the question a user would ask.
    await browser.click(f'a[href="/chats/{ann.id}"]')
    await browser.until("what is my cat called?")
    await browser.shoot("03-conversation")
    await browser.click(f'nav.tabs a[href="/chats/{ann.id}/memories"]')
    await browser.until("What would the bot recall?")
    await browser.type("#recall", "what is my cat called?")
    await browser.click("section.recall button")
    page = await browser.until("Ranked with")
    assert "my cat is called Miso" in page and "Felix" not in page
    await browser.shoot("04-memories-recall")

    # Correct it; the next model request carries the correction.
    await browser.click("section.recall tbody a")
    await browser.until("Correct the text")
    await browser.shoot("05-memory")
    await browser.type("#content", "my cat is called Mochi", clear=True)
    await browser.click("#save")
    await browser.until("Saved.")
    await say(runtime, "ann", "what is my cat called again?", "Ann")
    assert "[PROFILE] my cat is called Mochi" in newest_block(fake_llm)

    # Forget another; a reflector pass offered the same fact does not learn it again.
    await browser.open(f"/chats/{ann.id}/memories")
    await browser.click("table.memories tbody tr:nth-child(1) a")  # newest first: Porto
    await browser.until("my sister lives in Porto")
    await browser.click("#forget")
    page = await browser.until("Forgotten: memory #")
    assert "the operator (dashboard)" in page
    await browser.shoot("06-memories-forgotten")
    fake_llm.add(reflector_offers("Ann's sister lives in Porto", "Ann drinks green tea daily"))
    [reflector] = [e for e in runtime.extensions if isinstance(e, ReflectorExtension)]
    report = await reflector.reflector.run_pass([ann.id])
    assert report.ok, report.lines()
    kept = [m.content for m in runtime_memories(runtime, ann.id)]
    assert "Ann drinks green tea daily" in kept  # the pass did run and store
    assert not any("Porto" in content for content in kept)
    await browser.open(f"/chats/{ann.id}/memories")
    await browser.until("Ann drinks green tea daily")

    for name, path in [
        ("07-notes", f"/chats/{ann.id}/notes"),
        ("08-strategies", f"/chats/{ann.id}/strategies"),
        ("09-reflector", f"/chats/{ann.id}/reflector"),
        ("10-context", f"/chats/{ann.id}/context"),
        ("11-pictures", "/pictures"),
        ("12-health", "/health"),
    ]:
        await browser.open(path)
        assert "Traceback" not in await browser.text()
        await browser.shoot(name)


def runtime_memories(runtime: Runtime, chat_id: int) -> list[Any]:
    from memory.extension import MemoryExtension

    [memory] = [e for e in runtime.extensions if isinstance(e, MemoryExtension)]
    return memory.keeper.store.list(chat_id, include_global=False)
