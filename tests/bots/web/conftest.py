"""The dashboard's fixtures: a started runtime with two chats that say similar things, its
dashboard app, and an HTTP client that speaks to the app as a browser would.

The runtime is on SQLite unless a test asks for both engines with `ON_BOTH_ENGINES` (a
module's `pytestmark`, or one test's mark): then it runs once on SQLite and once on a fresh
PostgreSQL database, with the dashboard reading through the same `DatabaseDashboardStore`."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from bots.runtime import Runtime
from bots.web.app import build_app
from bots.web.extension import WebExtension
from core.api import Chat, Inbound
from core.config import Config
from core.storage.database import PostgresDatabase, SqliteDatabase
from core.storage.engine import Storage
from memory.extension import MemoryExtension
from memory.keeper import MemoryKeeper

ON_BOTH_ENGINES = pytest.mark.parametrize(
    "web_storage_url", ["sqlite", "postgresql"], indirect=True
)
TOKEN = "test-token-3f9a-0123456789abcdef"
ORIGIN = "http://127.0.0.1:8765"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Site:
    """The app, its client (cookies kept), and the runtime behind it."""

    runtime: Runtime
    client: httpx.AsyncClient
    ann: Chat
    bob: Chat
    csrf: str = ""

    @property
    def keeper(self) -> MemoryKeeper:
        [memory] = [e for e in self.runtime.extensions if isinstance(e, MemoryExtension)]
        return memory.keeper

    async def login(self) -> None:
        answer = await self.client.post(
            "/login", data={"token": TOKEN, "next": "/"}, headers={"Origin": ORIGIN}
        )
        assert answer.status_code == 303, answer.text
        page = await self.client.get("/")
        found = CSRF.search(page.text)
        assert found is not None
        self.csrf = found.group(1)

    async def post(self, path: str, data: dict[str, str] | None = None) -> httpx.Response:
        """A form POST from a page of the dashboard: same origin, with the session's token."""
        form = {"csrf": self.csrf, **(data or {})}
        return await self.client.post(path, data=form, headers={"Origin": ORIGIN})

    def memory_id(self, chat: Chat, text: str) -> int:
        [memory] = [m for m in self.keeper.store.list(chat.id) if text in m.content]
        return memory.id


async def server_sent_events(response: httpx.Response) -> AsyncIterator[tuple[float, str, str]]:
    """(arrival time, event, data) of each server-sent event of a streamed response, as it
    arrives (an event without a name is a "message", as in a browser)."""
    buffer = ""
    async for chunk in response.aiter_text():
        buffer += chunk
        while "\n\n" in buffer:
            frame, buffer = buffer.split("\n\n", 1)
            fields = dict(line.split(": ", 1) for line in frame.splitlines())
            yield time.monotonic(), fields.get("event", "message"), fields.get("data", "")


async def say(runtime: Runtime, chat_id: str, text: str, name: str) -> None:
    await runtime.dispatcher(Inbound("terminal", chat_id, text, f"u-{chat_id}", name))


@pytest.fixture
def web_storage_url(request: pytest.FixtureRequest) -> str | None:
    """`[storage] url` of the test's runtime: None (the default SQLite file) unless the test
    is parametrized by `ON_BOTH_ENGINES`."""
    engine = getattr(request, "param", None)
    if engine == "postgresql":
        return str(request.getfixturevalue("migrated_postgres_url"))
    return None


@pytest.fixture
def config(config: Config, web_storage_url: str | None) -> Config:
    if web_storage_url is not None:
        config.storage.url = web_storage_url
    return config


@pytest.fixture
async def site(runtime: Runtime) -> AsyncIterator[Site]:
    """Ann and Bob each have a cat and tell the bot its name; Bob's chat also has notes."""
    await say(runtime, "ann", "remember: my cat is called Miso", "Ann")
    await say(runtime, "ann", "remember: my sister lives in Porto", "Ann")
    await say(runtime, "ann", "what is my cat called?", "Ann")
    await say(runtime, "bob", "remember: my cat is called Felix", "Bob")
    await say(runtime, "bob", "what is my cat called?", "Bob")
    ann = runtime.store.find_chat("terminal", "ann")
    bob = runtime.store.find_chat("terminal", "bob")
    assert ann is not None and bob is not None
    [web] = [e for e in runtime.extensions if isinstance(e, WebExtension)]
    site_keeper = web.dashboard().keeper
    site_keeper.files.write("chat", "terminal", "bob", "Bob's cat Felix is on a diet.")
    app = build_app(web.dashboard(), TOKEN)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as client:
        yield Site(runtime, client, ann, bob)


def written_rows(storage: Storage) -> object:
    """What a write would change. SQLite: the connection's count of changed rows. PostgreSQL
    (a pool of connections, no such counter): every row of every table with its `xmin`, the
    transaction that wrote it, so that even an update to the same values shows."""
    if isinstance(storage.database, SqliteDatabase):
        return storage.database.conn.total_changes
    assert isinstance(storage.database, PostgresDatabase)
    db = storage.database.pg
    tables = db.read(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename"
    )
    return {
        table: sorted(repr(row) for row in db.read(f'SELECT xmin::text, * FROM "{table}"'))
        for (table,) in tables
    }
