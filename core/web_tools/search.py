"""`web_search`: one query to the operator's search backend, the top results as
title, URL and snippet.

Backends and their wire formats:
- SearXNG: `GET {search_url}/search?q=…&format=json` → `{"results": [{title, url, content}]}`
  (the instance must enable the json format in its settings.yml `search.formats`).
- Brave: `GET https://api.search.brave.com/res/v1/web/search?q=…&count=N` with the key in
  `X-Subscription-Token` → `{"web": {"results": [{title, url, description}]}}`.
- Tavily: `POST https://api.tavily.com/search` `{"query", "max_results"}` with
  `Authorization: Bearer KEY` → `{"results": [{title, url, content}]}`.

The backend's URL is the operator's (config), not the model's, so the private-address
guard of `web_fetch` does not apply to it: a SearXNG on localhost or a Docker network is
the usual setup.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import dataclass
from typing import Any

import httpx

from core.config import WebToolsConfig
from core.errors import ToolError

BRAVE_URL = "https://api.search.brave.com/res/v1/web/search"
TAVILY_URL = "https://api.tavily.com/search"
MAX_ANSWER_BYTES = 2_000_000
MAX_SNIPPET_CHARS = 400
TAGS = re.compile(r"<[^>]+>")


@dataclass(frozen=True)
class SearchHit:
    title: str
    url: str
    snippet: str


@dataclass(frozen=True)
class SearchBackend:
    """A configured backend: its kind, endpoint and key (empty for SearXNG)."""

    kind: str
    url: str
    key: str
    results: int
    timeout_s: float

    def request(self, client: httpx.AsyncClient, query: str) -> httpx.Request:
        if self.kind == "searxng":
            params = {"q": query, "format": "json"}
            return client.build_request("GET", f"{self.url.rstrip('/')}/search", params=params)
        if self.kind == "brave":
            headers = {"X-Subscription-Token": self.key, "Accept": "application/json"}
            params = {"q": query, "count": str(self.results)}
            return client.build_request("GET", self.url, params=params, headers=headers)
        body = {"query": query, "max_results": self.results}
        headers = {"Authorization": f"Bearer {self.key}"}
        return client.build_request("POST", self.url, json=body, headers=headers)

    def hits(self, answer: Any) -> list[SearchHit]:
        """The results of a backend's JSON answer, at most `results`."""
        if not isinstance(answer, dict):
            raise ToolError(f"the {self.kind} backend answered no JSON object")
        rows = (answer.get("web") or {}).get("results") if self.kind == "brave" else None
        rows = rows if rows is not None else answer.get("results")
        if not isinstance(rows, list):
            raise ToolError(f"the {self.kind} backend's answer has no results list")
        found = [hit_of(row) for row in rows if isinstance(row, dict) and row.get("url")]
        return found[: self.results]


def hit_of(row: dict[str, Any]) -> SearchHit:
    snippet = str(row.get("content") or row.get("description") or row.get("snippet") or "")
    snippet = " ".join(TAGS.sub("", snippet).split())  # Brave marks matches with <strong>
    if len(snippet) > MAX_SNIPPET_CHARS:
        snippet = snippet[:MAX_SNIPPET_CHARS].rstrip() + "…"
    title = " ".join(TAGS.sub("", str(row.get("title") or "")).split())
    return SearchHit(title or str(row["url"]), str(row["url"]), snippet)


def backend_of(config: WebToolsConfig, env: dict[str, str] | None = None) -> SearchBackend | None:
    """The configured backend, or None: none configured, or its key is not set."""
    env = dict(os.environ) if env is None else env
    if not config.search:
        return None
    key = ""
    if config.search != "searxng":
        key = env.get(config.key_env(), "").strip()
        if not key:
            return None
    default = {"searxng": "", "brave": BRAVE_URL, "tavily": TAVILY_URL}[config.search]
    url = config.search_url or default
    return SearchBackend(config.search, url, key, config.search_results, config.search_timeout_s)


def why_no_backend(config: WebToolsConfig) -> str:
    if not config.search:
        return "no search backend is configured ([web_tools] search)"
    return f"{config.key_env()} is not set (the {config.search} key)"


async def search(backend: SearchBackend, query: str) -> list[SearchHit]:
    """The backend's top hits for `query`; a failure raises `ToolError` saying why."""
    try:
        async with (
            asyncio.timeout(backend.timeout_s),  # one deadline, a trickling answer included
            httpx.AsyncClient(timeout=backend.timeout_s) as client,
        ):
            response = await client.send(backend.request(client, query), stream=True)
            try:
                body = await read_capped(response)
            finally:
                await response.aclose()
    except (TimeoutError, httpx.TimeoutException):
        raise ToolError(
            f"the {backend.kind} backend did not answer in {backend.timeout_s:g} s"
        ) from None
    except httpx.HTTPError as exc:
        raise ToolError(f"the {backend.kind} backend failed: {type(exc).__name__}: {exc}") from None
    if response.status_code >= 400:
        excerpt = body[:200].decode("utf-8", "replace").strip()
        raise ToolError(
            f"the {backend.kind} backend answered HTTP {response.status_code}: {excerpt}"
        )
    try:
        answer = json.loads(body)
    except ValueError:
        raise ToolError(f"the {backend.kind} backend answered something that is not JSON") from None
    return backend.hits(answer)


async def read_capped(response: httpx.Response) -> bytes:
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise ToolError(f"the search backend's answer is over {MAX_ANSWER_BYTES:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def render_hits(query: str, hits: list[SearchHit]) -> str:
    if not hits:
        return f"no results for {query!r}"
    lines = []
    for number, hit in enumerate(hits, 1):
        lines.append(f"{number}. {hit.title}\n   {hit.url}")
        if hit.snippet:
            lines.append(f"   {hit.snippet}")
    return "\n".join(lines)
