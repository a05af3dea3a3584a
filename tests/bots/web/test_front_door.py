"""The dashboard's front door, over real HTTP on loopback: a foreign Host is refused (DNS
rebinding), wrong tokens are slowed down (429, Retry-After, doubling waits), a short token
stops the start with one clear line, and a bind beyond loopback over plain HTTP is loud."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from bots.runtime import Runtime, build_runtime
from bots.web.app import build_app
from bots.web.door import FREE_FAILURES, LoginThrottle, allowed_hosts, host_name
from bots.web.extension import WebExtension
from bots.web.service import WebService
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.config import Config
from tests.bots.web.conftest import TOKEN
from tests.conftest import mnemo_env, run_cli, write_config


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def serving(service: WebService) -> AsyncIterator[httpx.AsyncClient]:
    url = service.bind()
    task = asyncio.create_task(service.run())
    try:
        async with httpx.AsyncClient(base_url=url) as client:
            yield client
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
def runtime(config: Config) -> Iterator[Runtime]:
    """A bot not started: the front door needs no embedding model."""
    bot = build_runtime(config)
    yield bot
    bot.close()


def web_of(runtime: Runtime) -> WebExtension:
    [web] = [e for e in runtime.extensions if isinstance(e, WebExtension)]
    web.token = TOKEN
    return web


def test_host_names_are_read_without_their_port() -> None:
    assert host_name("127.0.0.1:8765") == "127.0.0.1"
    assert host_name("[::1]:8765") == "::1"
    assert host_name("Evil.Example") == "evil.example"
    names = allowed_hosts("0.0.0.0", ["mnemo.example"])
    assert names == {"localhost", "127.0.0.1", "::1", "mnemo.example"}  # no wildcard


async def test_a_foreign_host_name_is_refused_even_with_the_token(runtime: Runtime) -> None:
    runtime.config.web.allowed_hosts = ["Mnemo.Example"]
    async with serving(web_of(runtime).service("127.0.0.1", 0)) as client:
        rebound = {"Host": "evil.example", "Origin": "http://evil.example"}
        login = await client.post("/login", data={"token": TOKEN}, headers=rebound)
        assert login.status_code == 421 and "set-cookie" not in login.headers
        assert "[web] allowed_hosts" in login.text
        bearer = {"Host": "evil.example:8765", "Authorization": f"Bearer {TOKEN}"}
        assert (await client.get("/health", headers=bearer)).status_code == 421
        for name in ("localhost:8765", "mnemo.example", client.base_url.netloc.decode()):
            page = await client.get(
                "/health", headers={"Host": name, "Authorization": f"Bearer {TOKEN}"}
            )
            assert page.status_code == 200, name


async def test_wrong_tokens_wait_longer_and_longer(runtime: Runtime) -> None:
    clock = Clock()
    throttle = LoginThrottle(clock)
    dashboard = web_of(runtime).dashboard()
    service = WebService(lambda: build_app(dashboard, TOKEN, throttle=throttle), "127.0.0.1", 0)
    async with serving(service) as client:
        origin = {"Origin": str(client.base_url).rstrip("/")}

        async def login(token: str) -> httpx.Response:
            return await client.post("/login", data={"token": token}, headers=origin)

        for _ in range(FREE_FAILURES):
            assert (await login("wrong")).status_code == 403
        first = await login("wrong")
        assert first.status_code == 403 and "Wait 1 s" in first.text
        refused = await login(TOKEN)  # even the right token, while it must wait
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        clock.now += 1
        assert "Wait 2 s" in (await login("wrong")).text
        clock.now += 1
        assert (await login(TOKEN)).headers["retry-after"] == "1"
        clock.now += 1
        assert (await login(TOKEN)).status_code == 303  # and the record is cleared
        client.cookies.clear()  # a script: no session, a bearer token on each request
        for _ in range(FREE_FAILURES + 1):
            guess = await client.get("/", headers={"Authorization": "Bearer guess"})
            assert guess.status_code == 303
        scripted = await client.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
        assert scripted.status_code == 429 and scripted.headers["retry-after"] == "1"


def test_a_short_token_stops_the_start_with_one_line(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, tmp_path / "data")
    env = {**mnemo_env(), "MNEMO_WEB_TOKEN": "a"}
    result = run_cli(["--config", str(config), "web", "--port", "0"], env, tmp_path, timeout=60)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "MNEMO_WEB_TOKEN" in result.stderr and "at least 24 characters" in result.stderr


@pytest.mark.parametrize(
    ("host", "behind_tls", "warned"),
    [("0.0.0.0", False, True), ("192.0.2.7", False, True), ("0.0.0.0", True, False)]
    + [("127.0.0.1", False, False), ("localhost", False, False), ("::1", False, False)],
)
def test_a_bind_beyond_loopback_without_tls_is_loud(
    runtime: Runtime, capsys: pytest.CaptureFixture[str], host: str, behind_tls: bool, warned: bool
) -> None:
    runtime.config.web.behind_tls = behind_tls
    web_of(runtime).announce(f"http://{host}:8765", host)
    said = capsys.readouterr().err
    assert ("WARNING" in said and "plain HTTP" in said and "behind_tls" in said) is warned
