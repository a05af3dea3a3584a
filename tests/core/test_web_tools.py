"""web_fetch and web_search against real HTTP servers on 127.0.0.1: a page as readable text,
refusals after DNS and on redirects, the size and time caps, binaries refused; each search
backend's wire format (SearXNG, Brave, Tavily); who may call them, through real turns with
the fake model server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest

from bots.runtime import build_runtime
from core import plugin as default_plugin
from core.api import Chat, Inbound, TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.bench.fakes.loopback import JsonHandler, LoopbackServer
from core.config import Config, FetchConfig, WebToolsConfig, load_config
from core.errors import ConfigError, ToolError
from core.web_tools import plugin as web_tools_plugin
from core.web_tools.extension import WebTools, WebToolsExtension

MB = 1_000_000
ARTICLE = (
    b"<html><head><title>Otters</title></head><body>"
    b"<nav><a href='/'>Home</a> | <a href='/shop'>Shop</a></nav>"
    b"<article><h1>Sea otters hold hands</h1>"
    b"<p>Sea otters hold hands while they sleep so that they do not drift apart. "
    b"A group of resting otters is called a raft, and rafts can hold a hundred otters.</p>"
    b"<p>They wrap themselves in kelp as well, which anchors them in place overnight.</p>"
    b"</article><footer>Copyright 2026 Otter Facts Inc. Cookie settings.</footer>"
    b"</body></html>"
)


class Site(JsonHandler):
    """/article, /redirect?to=URL, /big (50 MB of HTML, no length), /slow, /image, /json."""

    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        Site.hits.append(self.path)
        parts = urlsplit(self.path)
        if parts.path == "/article":
            self.send_body(200, ARTICLE, "text/html; charset=utf-8")
        elif parts.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", parse_qs(parts.query)["to"][0])
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif parts.path == "/big":
            self._stream(b"<p>" + b"x" * 65_530 + b"</p>", 50 * MB // 65_536, 0.0)
        elif parts.path == "/slow":
            self._stream(b"<p>slow</p>", 1000, 0.1)
        elif parts.path == "/image":
            self.send_body(200, b"\x89PNG\r\n" + b"\x00" * 5000, "image/png")
        elif parts.path == "/long":
            paragraphs = "".join(f"<p>Paragraph {n} tells fact number {n} about otters.</p>"
                                 for n in range(400))  # fmt: skip
            self.send_body(200, f"<html><body><article>{paragraphs}</article></body></html>"
                           .encode(), "text/html")  # fmt: skip
        elif parts.path == "/json":
            self.send_body(200, b'{"answer":42,"items":[1,2]}', "application/json")
        else:
            self.send_body(404, b"<html><body><p>No such page here.</p></body></html>", "text/html")

    def _stream(self, chunk: bytes, count: int, pause: float) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        try:
            for _ in range(count):
                self.wfile.write(chunk)
                self.wfile.flush()
                time.sleep(pause)
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True


@pytest.fixture
def site() -> Iterator[str]:
    Site.hits = []
    with LoopbackServer(Site, poll_interval=0.05) as server:
        yield server.origin


def web_config(tmp_path: Any, allow: list[str], **fetch: Any) -> Config:
    config = load_config(None, env={})
    config.storage.data_dir = tmp_path
    config.fetch = FetchConfig(allow=allow, **{"timeout_s": 5.0, **fetch})
    return config


def turn(kind: str = "private", chat_id: str = "t") -> TurnContext:
    chat = Chat(1, "terminal", chat_id, "", kind)
    return TurnContext(chat, Inbound("terminal", chat_id, "hi", chat_kind=kind))  # type: ignore[arg-type]


async def fetch(config: Config, url: str) -> str:
    return await WebTools(config, env={}).web_fetch(turn(), {"url": url})


async def test_an_html_page_comes_back_as_its_main_text(tmp_path: Any, site: str) -> None:
    text = await fetch(web_config(tmp_path, ["127.0.0.1"]), f"{site}/article")
    assert text.startswith(f"URL: {site}/article\n")
    assert "Title: Sea otters hold hands" in text and "Type: text/html" in text
    assert "hold hands while they sleep" in text and "kelp" in text
    assert "Cookie settings" not in text and "Shop" not in text  # boilerplate left out


async def test_json_is_pretty_printed_and_a_404_is_a_tool_error(tmp_path: Any, site: str) -> None:
    config = web_config(tmp_path, ["127.0.0.1"])
    assert '"answer": 42' in await fetch(config, f"{site}/json")
    with pytest.raises(ToolError, match="HTTP 404 .*No such page here"):
        await fetch(config, f"{site}/missing")


async def test_a_loopback_page_is_refused_unless_the_operator_allows_it(
    tmp_path: Any, site: str
) -> None:
    with pytest.raises(ToolError, match="loopback address .* refused"):
        await fetch(web_config(tmp_path, []), f"{site}/article")
    assert Site.hits == []


async def test_a_name_resolving_to_a_private_address_is_refused(tmp_path: Any, site: str) -> None:
    """The check runs on what DNS answers: `localhost` is 127.0.0.1, so it is refused."""
    port = urlsplit(site).port
    with pytest.raises(ToolError, match="localhost is a loopback address"):
        await fetch(web_config(tmp_path, []), f"http://localhost:{port}/article")
    assert Site.hits == []


@pytest.mark.parametrize(
    "target", ["http://127.0.0.1:{port}/article", "http://10.0.0.7/", "http://169.254.169.254/"]
)
async def test_a_redirect_inside_is_refused(tmp_path: Any, site: str, target: str) -> None:
    """Only the name `localhost` is allowed: its first hop goes through, the redirect to a
    bare inside address is checked on its own and refused before anything is sent."""
    port = urlsplit(site).port
    start = f"http://localhost:{port}/redirect?to={target.format(port=port)}"
    with pytest.raises(ToolError, match="refused"):
        await fetch(web_config(tmp_path, ["localhost"]), start)
    assert [hit.split("?")[0] for hit in Site.hits] == ["/redirect"]


async def test_a_50_mb_page_stops_at_the_cap(tmp_path: Any, site: str) -> None:
    config = web_config(tmp_path, ["127.0.0.1"], max_bytes=2 * MB, timeout_s=20.0)
    started = time.monotonic()
    with pytest.raises(ToolError, match="over the cap of 2,000,000 bytes"):
        await fetch(config, f"{site}/big")
    assert time.monotonic() - started < 10


async def test_a_slow_page_stops_at_the_deadline(tmp_path: Any, site: str) -> None:
    config = web_config(tmp_path, ["127.0.0.1"], timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(ToolError, match="within 1 s"):
        await fetch(config, f"{site}/slow")
    assert time.monotonic() - started < 4


async def test_a_binary_is_refused_from_its_headers(tmp_path: Any, site: str) -> None:
    with pytest.raises(ToolError, match="image/png, which is refused"):
        await fetch(web_config(tmp_path, ["127.0.0.1"]), f"{site}/image")


# --- web_search: one fake per backend, speaking its wire format -------------------------


class Backends(JsonHandler):
    """SearXNG (`GET /search?format=json`), Brave (`GET /res/v1/web/search` with
    `X-Subscription-Token`) and Tavily (`POST /search` with a bearer key)."""

    seen: ClassVar[list[dict[str, Any]]] = []

    def do_GET(self) -> None:  # noqa: N802
        parts = urlsplit(self.path)
        query = {key: values[0] for key, values in parse_qs(parts.query).items()}
        Backends.seen.append({"path": parts.path, "query": query, **dict(self.headers)})
        if parts.path == "/search" and query.get("format") == "json":
            rows = [
                {"title": f"Searx {n}", "url": f"https://s.example/{n}", "content": f"about {n}"}
                for n in range(8)
            ]
            self.send_json(200, json.dumps({"query": query["q"], "results": rows}))
        elif parts.path == "/res/v1/web/search":
            if self.headers.get("X-Subscription-Token") != "brave-key":
                self.send_json(401, '{"error": "bad token"}')
                return
            rows = [{"title": "<strong>Brave</strong> one", "url": "https://b.example/1",
                     "description": "the <strong>first</strong> hit"}]  # fmt: skip
            self.send_json(200, json.dumps({"type": "search", "web": {"results": rows}}))
        else:
            self.send_json(403, '{"error": "format not allowed"}')

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.read_body() or b"{}")
        Backends.seen.append({"path": self.path, "body": body, **dict(self.headers)})
        if self.headers.get("Authorization") != "Bearer tvly-key":
            self.send_json(401, '{"detail": "unauthorized"}')
            return
        rows = [{"title": "Tavily one", "url": "https://t.example/1", "content": "snippet",
                 "score": 0.9}]  # fmt: skip
        self.send_json(200, json.dumps({"query": body["query"], "results": rows}))


@pytest.fixture
def backends() -> Iterator[str]:
    Backends.seen = []
    with LoopbackServer(Backends) as server:
        yield server.origin


def search_tools(tmp_path: Any, env: dict[str, str], **settings: Any) -> WebTools:
    config = load_config(None, env={})
    config.storage.data_dir = tmp_path
    config.web_tools = WebToolsConfig(**settings)
    return WebTools(config, env=env)


async def test_searxng_results_come_back_as_the_top_n(tmp_path: Any, backends: str) -> None:
    tools = search_tools(tmp_path, {}, search="searxng", search_url=backends, search_results=3)
    text = await tools.web_search(turn(), {"query": "  sea   otters "})
    assert text.splitlines()[:3] == ["1. Searx 0", "   https://s.example/0", "   about 0"]
    assert "3. Searx 2" in text and "Searx 3" not in text
    assert Backends.seen[0]["query"] == {"q": "sea otters", "format": "json"}


async def test_brave_gets_its_key_header_and_its_markup_is_dropped(
    tmp_path: Any, backends: str
) -> None:
    url = f"{backends}/res/v1/web/search"
    tools = search_tools(tmp_path, {"BRAVE_API_KEY": "brave-key"}, search="brave", search_url=url)
    text = await tools.web_search(turn(), {"query": "otters"})
    assert text == "1. Brave one\n   https://b.example/1\n   the first hit"
    assert Backends.seen[0]["query"] == {"q": "otters", "count": "5"}
    wrong = search_tools(tmp_path, {"BRAVE_API_KEY": "nope"}, search="brave", search_url=url)
    with pytest.raises(ToolError, match="HTTP 401"):
        await wrong.web_search(turn(), {"query": "otters"})


async def test_tavily_is_posted_with_a_bearer_key(tmp_path: Any, backends: str) -> None:
    env = {"MY_TAVILY": "tvly-key"}
    tools = search_tools(
        tmp_path, env, search="tavily", search_url=f"{backends}/search", search_key_env="MY_TAVILY"
    )
    text = await tools.web_search(turn(), {"query": "otters"})
    assert text == "1. Tavily one\n   https://t.example/1\n   snippet"
    assert Backends.seen[0]["body"] == {"query": "otters", "max_results": 5}


def test_no_backend_or_no_key_means_no_web_search(tmp_path: Any) -> None:
    chat = turn().chat
    plain = search_tools(tmp_path, {})
    assert [tool.name for tool in plain.tools_for(chat)] == ["web_fetch"]
    assert "no search backend" in plain.why_missing(chat, "web_search")
    keyless = search_tools(tmp_path, {}, search="brave")
    assert [tool.name for tool in keyless.tools_for(chat)] == ["web_fetch"]
    assert "BRAVE_API_KEY is not set" in keyless.why_missing(chat, "web_search")
    with pytest.raises(ValueError, match="needs search_url"):
        WebToolsConfig(search="searxng")


def test_the_web_tools_config_comes_from_the_environment_too() -> None:
    env = {
        "MNEMO_WEB_SEARCH": "searxng",
        "MNEMO_WEB_SEARCH_URL": "http://searxng:8080",
        "MNEMO_WEB_TOOLS_CHATS": "private, telegram:-100123",
        "MNEMO_FETCH_ALLOW": "10.0.0.0/8,wiki.lan",
    }
    config = load_config(None, env=env)
    assert config.web_tools.search == "searxng"
    assert config.web_tools.search_url == "http://searxng:8080"
    assert config.web_tools.chats == ["private", "telegram:-100123"]
    assert config.fetch.allow == ["10.0.0.0/8", "wiki.lan"]
    with pytest.raises(ConfigError, match=r"\[web_tools\] chats"):
        load_config(None, env={"MNEMO_WEB_TOOLS_CHATS": "12345"})


# --- who may call them: real turns through the fake model server -------------------------


def tool_names(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools") or []]


async def test_groups_opt_in_and_a_refused_call_is_a_readable_tool_error(
    config: Config, fake_llm: FakeOpenAIServer, site: str
) -> None:
    config.fetch = FetchConfig(allow=["127.0.0.1"], timeout_s=5.0)
    call = FakeReply(tool_calls=[tool_call("web_fetch", {"url": f"{site}/article"}, "c1")])
    fake_llm.add(call, FakeReply("read it"), call, FakeReply("refused"))
    runtime = build_runtime(config, plugins=[default_plugin, web_tools_plugin])
    try:
        private = await runtime.agent.handle(Inbound("terminal", "me", "read the page"))
        group = await runtime.agent.handle(
            Inbound("terminal", "room", "read it", chat_kind="group", sender_id="u1")
        )
    finally:
        runtime.close()
    assert private is not None and private.text == "read it"
    assert group is not None and group.text == "refused"
    first, second, third, fourth = fake_llm.requests
    assert "web_fetch" in tool_names(first) and "web_search" not in tool_names(first)
    result = [m["content"] for m in second["messages"] if m["role"] == "tool"][0]
    assert "hold hands while they sleep" in result
    assert "web_fetch" not in tool_names(third)
    refused = [m["content"] for m in fourth["messages"] if m["role"] == "tool"][0]
    assert refused.startswith("error:") and "not open to this chat" in refused
    assert Site.hits == ["/article"]  # the group's call never reached the site


async def test_doctor_lines_say_what_is_on(tmp_path: Any, backends: str) -> None:
    config = load_config(None, env={})
    config.storage.data_dir = tmp_path
    config.web_tools = WebToolsConfig(search="searxng", search_url=backends)
    lines = [check.line() for check in await WebToolsExtension(config, env={}).checks()]
    assert lines[0].startswith("[ok  ] web_fetch: on for private, control")
    assert lines[1] == f"[ok  ] web_search: searxng at {backends} answers"
    config.web_tools = WebToolsConfig(search="tavily")
    lines = [check.line() for check in await WebToolsExtension(config, env={}).checks()]
    assert lines[1] == "[warn] web_search: off: TAVILY_API_KEY is not set (the tavily key)"


async def test_a_long_page_is_stored_and_excerpted_like_any_tool_result(
    config: Config, fake_llm: FakeOpenAIServer, site: str
) -> None:
    config.fetch = FetchConfig(allow=["127.0.0.1"], timeout_s=5.0)
    config.context.tool_result_max_chars = 2_000
    call = FakeReply(tool_calls=[tool_call("web_fetch", {"url": f"{site}/long"}, "c1")])
    fake_llm.add(call, FakeReply("long read"))
    runtime = build_runtime(config, plugins=[default_plugin, web_tools_plugin])
    try:
        reply = await runtime.agent.handle(Inbound("terminal", "me", "read the long page"))
    finally:
        runtime.close()
    assert reply is not None and reply.text == "long read"
    result = [m["content"] for m in fake_llm.requests[1]["messages"] if m["role"] == "tool"][0]
    assert result.startswith("[tool result of ") and "read more with read_tool_result" in result
    assert "Paragraph 0 " in result and "Paragraph 399 " in result  # head and tail kept
    assert len(result) < 2_000


@pytest.mark.parametrize(
    ("patterns", "allowed"),
    [
        (["private", "control"], ["private-dm", "control-group"]),
        (["control"], ["control-group"]),
        (["terminal:*"], ["private-dm", "control-group", "other-group"]),
        (["terminal:other"], ["other-group"]),
        (["*"], ["private-dm", "control-group", "other-group"]),
        ([], []),
    ],
)
def test_who_may_call_the_web_tools(tmp_path: Any, patterns: list[str], allowed: list[str]) -> None:
    config = load_config(None, env={})
    config.storage.data_dir = tmp_path
    config.agent.control_chats = ["terminal:boss"]
    config.web_tools = WebToolsConfig(chats=patterns)
    tools = WebTools(config, env={})
    chats = {
        "private-dm": turn("private", "me").chat,
        "control-group": turn("group", "boss").chat,
        "other-group": turn("group", "other").chat,
    }
    assert [name for name, chat in chats.items() if tools.tools_for(chat)] == allowed
