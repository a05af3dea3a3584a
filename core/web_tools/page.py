"""`web_fetch`: one URL through the guarded fetch (`core.tools.guarded_fetch`), turned into
readable text: HTML through trafilatura (the main text, headings, lists and tables as
Markdown; menus, footers and ads left out), JSON pretty-printed, plain text as it is.
Binaries (images, PDFs, archives) are refused from their headers, before the body is read.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, replace

from core.config import Config
from core.errors import FetchError, ToolError
from core.text import clip_middle
from core.tools.guarded_fetch import FetchPolicy, FetchResult, guarded_fetch, media_type

# What web_fetch reads: HTML, any text, JSON and XML (feeds). Everything else is refused.
READABLE_TYPES = ("text/", "application/xhtml+xml", "application/json", "+json",
                  "application/xml", "+xml")  # fmt: skip
HTML_TYPES = ("text/html", "application/xhtml+xml")
CHARSET = re.compile(r"charset=[\"']?([A-Za-z0-9._-]+)", re.IGNORECASE)
ERROR_EXCERPT_CHARS = 600


@dataclass(frozen=True)
class Page:
    """A fetched page as the model reads it."""

    url: str
    status: int
    media: str
    title: str
    text: str
    redirects: tuple[str, ...] = ()

    def render(self, max_chars: int) -> str:
        head = [f"URL: {self.url}"]
        if self.redirects:
            head.append(f"Redirected {len(self.redirects)}x (final URL above)")
        if self.title:
            head.append(f"Title: {self.title}")
        head.append(f"Type: {self.media or 'unknown'}")
        body = self.text.strip() or "(no readable text on this page)"
        if len(body) > max_chars:
            body = body[:max_chars] + f"\n[… cut at {max_chars:,} of {len(body):,} characters]"
        return "\n".join(head) + "\n\n" + body


def fetch_policy(config: Config) -> FetchPolicy:
    """`[fetch]` for web_fetch: its caps and allow-list, reading only text-like types."""
    return replace(FetchPolicy.from_config(config.fetch), content_types=READABLE_TYPES)


async def fetch_page(url: str, policy: FetchPolicy) -> Page:
    """`url` as a `Page`. A refusal, a cap, a timeout or an HTTP error raises `ToolError`
    with a reason the model can act on."""
    try:
        result = await guarded_fetch(url.strip(), policy)
    except FetchError as exc:
        raise ToolError(str(exc)) from None
    page = await asyncio.to_thread(readable, result)
    if result.status >= 400:
        excerpt = clip_middle(page.text.strip(), ERROR_EXCERPT_CHARS)
        said = f": {excerpt}" if excerpt else ""
        raise ToolError(f"HTTP {result.status} from {result.url}{said}")
    return page


def readable(result: FetchResult) -> Page:
    """The body of `result` as text (CPU work: run it off the event loop)."""
    media = media_type(result.content_type)
    text = decode(result.body, result.content_type)
    if not media:
        media = sniff(result.body, text)
    title = ""
    if media in HTML_TYPES:
        title, text = html_text(result.body, result.url)
    elif media == "application/json" or media.endswith("+json"):
        text = pretty_json(text)
    redirects = tuple(result.redirects)
    return Page(result.url, result.status, media, title, text, redirects)


def sniff(body: bytes, text: str) -> str:
    """A media type for a body sent without one; a binary is refused."""
    start = body[:512].lstrip().lower()
    if start.startswith((b"<!doctype html", b"<html")) or b"<body" in start:
        return "text/html"
    if "\ufffd" in text[:2000] or "\x00" in text[:2000]:
        raise ToolError("the page has no Content-Type and is not text; web_fetch reads only text")
    return "text/plain"


def decode(body: bytes, content_type: str) -> str:
    found = CHARSET.search(content_type)
    charset = found.group(1) if found else "utf-8"
    try:
        return body.decode(charset, errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


def html_text(body: bytes, url: str) -> tuple[str, str]:
    """(title, main text as Markdown) of an HTML page; the whole page's text when the
    extractor finds no main text (a short page, a listing)."""
    import trafilatura

    text = trafilatura.extract(
        body, url=url, include_tables=True, include_links=False, favor_recall=True,
        with_metadata=True, output_format="markdown",
    )  # fmt: skip
    if not text:
        return "", trafilatura.html2txt(body) or ""
    return split_front_matter(text)


def split_front_matter(text: str) -> tuple[str, str]:
    """trafilatura's `---` block of metadata off the text; its `title` kept."""
    if not text.startswith("---\n"):
        return "", text
    meta, _, rest = text[4:].partition("\n---\n")
    titles = [line[6:].strip() for line in meta.splitlines() if line.startswith("title:")]
    return (titles[0].strip("\"'") if titles else ""), rest


def pretty_json(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=1, ensure_ascii=False)
    except ValueError:
        return text
