"""The dashboard in a running bot: `[web] enabled` adds it to `mnemo run`'s services, it
serves real HTTP on loopback inside the caller's event loop, and stops when cancelled."""

from __future__ import annotations

import asyncio
import contextlib

import httpx

from bots.runtime import Runtime
from bots.web.extension import WebExtension
from core.config import load_config


def test_the_token_comes_from_the_environment() -> None:
    config = load_config(None, env={"MNEMO_WEB_TOKEN": "from-env-0123456789abcdefgh"})
    assert config.web.token == "from-env-0123456789abcdefgh" and config.web.host == "127.0.0.1"
    assert not config.web.enabled


async def test_enabled_it_serves_inside_the_loop_and_stops_when_cancelled(
    runtime: Runtime,
) -> None:
    [web] = [e for e in runtime.extensions if isinstance(e, WebExtension)]
    assert web.services() == []  # off by default
    runtime.config.web.enabled = True
    [service] = web.services()
    assert web.token_generated and len(web.token) >= 20  # none configured: a random one
    serving = web.service("127.0.0.1", 0)
    url = serving.bind()
    assert url.startswith("http://127.0.0.1:")
    task = asyncio.create_task(serving.run())
    async with httpx.AsyncClient(base_url=url) as client:
        stranger = await client.get("/")
        assert stranger.status_code == 303 and stranger.headers["cache-control"] == "no-store"
        page = await client.get("/health", headers={"Authorization": f"Bearer {web.token}"})
        assert page.status_code == 200 and "embedding model" in page.text
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    async with httpx.AsyncClient(base_url=url) as client:
        try:
            await client.get("/")
        except httpx.ConnectError:
            pass
        else:
            raise AssertionError("the dashboard still answers after it was stopped")
    assert service.name == "web"
