"""The web tools of a running bot: `web_fetch` and `web_search` for the chats `[web_tools]
chats` names (default: private chats and control chats; groups opt in), `mnemo doctor`
lines for them.

Their results go through the tool loop like any tool's: the per-turn call budget
(`[agent] max_tool_calls`), and a long page stored as a file and excerpted
(`core.tools.results`). Each tool has its own deadline and size cap (`[fetch]`, `[web_tools]`).
"""

from __future__ import annotations

from typing import Any

import httpx

from core.api import Chat, Check, Extension, Tool, ToolSource, TurnContext
from core.config import Config
from core.errors import ToolError
from core.tools.access import chat_matches
from core.web_tools.page import fetch_page, fetch_policy
from core.web_tools.search import backend_of, render_hits, search, why_no_backend

FETCH = "web_fetch"
SEARCH = "web_search"
DOCTOR_TIMEOUT_S = 5.0


def url_schema() -> dict[str, Any]:
    url = {"type": "string", "description": "an http(s) URL"}
    return {"type": "object", "properties": {"url": url}, "required": ["url"]}


def query_schema() -> dict[str, Any]:
    query = {"type": "string", "description": "what to search the web for"}
    return {"type": "object", "properties": {"query": query}, "required": ["query"]}


class WebTools(ToolSource):
    """web_fetch and (with a backend) web_search, for the chats allowed to use them."""

    def __init__(self, config: Config, env: dict[str, str] | None = None) -> None:
        self.config = config
        self.settings = config.web_tools
        self.policy = fetch_policy(config)
        self.backend = backend_of(config.web_tools, env)
        self._tools = self._build()

    def allowed(self, chat: Chat) -> bool:
        return chat_matches(self.settings.chats, chat, self.config.agent.control_chats)

    def tools_for(self, chat: Chat) -> list[Tool]:
        return list(self._tools) if self.allowed(chat) else []

    def why_missing(self, chat: Chat, name: str) -> str:
        if name not in (FETCH, SEARCH):
            return ""
        if name == SEARCH and self.backend is None:
            return why_no_backend(self.settings)
        if name == FETCH and not self.settings.fetch:
            return "web_fetch is off ([web_tools] fetch = false)"
        if not self.allowed(chat):
            return f"{name} is not open to this chat ([web_tools] chats)"
        return ""

    def _build(self) -> list[Tool]:
        tools = []
        if self.settings.fetch:
            description = (
                "Fetch a web page (http/https) and return its main text as Markdown. "
                "HTML, plain text and JSON only; private and local addresses are refused."
            )
            tools.append(Tool(FETCH, description, self.web_fetch, url_schema(), read_only=True))
        if self.backend is not None:
            description = "Search the web; returns the top results as title, URL and snippet."
            tools.append(Tool(SEARCH, description, self.web_search, query_schema(), read_only=True))
        return tools

    async def web_fetch(self, turn: TurnContext, args: dict[str, Any]) -> str:
        url = str(args.get("url") or "").strip()
        if not url:
            raise ToolError("`url` must be an http(s) URL")
        if "://" not in url:
            url = f"https://{url}"
        page = await fetch_page(url, self.policy)
        return page.render(self.settings.max_chars)

    async def web_search(self, turn: TurnContext, args: dict[str, Any]) -> str:
        query = " ".join(str(args.get("query") or "").split())
        if not query:
            raise ToolError("`query` must be a non-empty string")
        if self.backend is None:  # never: the tool exists only with a backend
            raise ToolError(why_no_backend(self.settings))
        return render_hits(query, await search(self.backend, query))


class WebToolsExtension(Extension):
    name = "web_tools"

    def __init__(self, config: Config, env: dict[str, str] | None = None) -> None:
        self.source = WebTools(config, env)

    def tool_sources(self) -> list[ToolSource]:
        return [self.source]

    async def checks(self) -> list[Check]:
        settings = self.source.settings
        who = ", ".join(settings.chats) or "no chat"
        checks = []
        if settings.fetch:
            fetch = self.source.config.fetch
            inside = ", ".join(fetch.allow) or "none"
            detail = (
                f"on for {who}; caps {fetch.max_bytes:,} bytes, {fetch.timeout_s:g} s, "
                f"{fetch.max_redirects} redirects; allowed inside: {inside}"
            )
            checks.append(Check("web_fetch", True, detail))
        checks.append(await search_check(self.source))
        return checks


async def search_check(source: WebTools) -> Check:
    """Whether web_search exists, and for SearXNG whether it answers JSON (a Brave or
    Tavily query costs quota, so only their key is checked)."""
    backend, settings = source.backend, source.settings
    if backend is None:
        ok = not settings.search
        return Check("web_search", ok, f"off: {why_no_backend(settings)}", fatal=False)
    if backend.kind != "searxng":
        return Check("web_search", True, f"{backend.kind}, key set; not probed (costs quota)")
    try:
        async with httpx.AsyncClient(timeout=DOCTOR_TIMEOUT_S) as client:
            params = {"q": "mnemo", "format": "json"}
            response = await client.get(f"{backend.url.rstrip('/')}/search", params=params)
        response.json()
        response.raise_for_status()
    except (httpx.HTTPError, ValueError) as exc:
        detail = f"searxng at {backend.url} does not answer JSON ({type(exc).__name__}: {exc})"
        return Check("web_search", False, detail, fatal=False)
    return Check("web_search", True, f"searxng at {backend.url} answers")
