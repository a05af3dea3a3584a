"""The guarded fetch against real HTTP servers on 127.0.0.1: refusals (before any byte is
sent), redirects checked one by one, the size cap on a 50 MB body, the deadline on a slow
body, and the allow-list as the only way through."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from core.bench.fakes.loopback import JsonHandler, LoopbackServer
from core.config import FetchConfig
from core.errors import FetchError, FetchRefused, FetchTimeout, FetchTooLarge
from core.tools.guarded_fetch import (
    FetchPolicy,
    checked_address,
    guarded_fetch,
    pinned_request,
    refusal_reason,
)

MB = 1_000_000


class Site(JsonHandler):
    """/page, /redirect?to=URL, /big (50 MB, no length), /declared (says 50 MB), /slow."""

    hits: list[str] = []
    hosts: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        Site.hits.append(self.path)
        Site.hosts.append(self.headers.get("Host", ""))
        parts = urlsplit(self.path)
        if parts.path == "/page":
            self.send_body(200, b"<html><body><p>Hello</p></body></html>", "text/html")
        elif parts.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", parse_qs(parts.query)["to"][0])
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif parts.path in ("/big", "/declared"):
            self._big(declared=parts.path == "/declared")
        elif parts.path == "/slow":
            self._slow()
        else:
            self.send_body(404, b"no", "text/plain")

    def _big(self, declared: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        if declared:
            self.send_header("Content-Length", str(50 * MB))
        self.end_headers()
        chunk = b"x" * 65_536
        try:
            for _ in range(50 * MB // len(chunk)):
                self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def _slow(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        try:
            for _ in range(1000):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture
def site() -> Iterator[str]:
    Site.hits = []
    Site.hosts = []
    with LoopbackServer(Site, poll_interval=0.05) as server:
        yield server.origin


LOOPBACK_ALLOWED = FetchPolicy.from_config(FetchConfig(allow=["127.0.0.1"], timeout_s=5))


async def test_a_loopback_server_is_refused_before_any_request_is_sent(site: str) -> None:
    with pytest.raises(FetchRefused, match="loopback"):
        await guarded_fetch(f"{site}/page", FetchPolicy())
    assert Site.hits == []


async def test_the_allow_list_lets_a_named_network_through(site: str) -> None:
    result = await guarded_fetch(f"{site}/page", LOOPBACK_ALLOWED)
    assert result.status == 200 and b"Hello" in result.body
    assert result.content_type == "text/html" and result.url == f"{site}/page"


@pytest.mark.parametrize(
    "target",
    [
        "http://10.1.2.3/x",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://[::ffff:127.0.0.1]:1/",
        "http://[::ffff:10.0.0.1]/",
        "http://0.0.0.0/",
        "http://192.168.1.1/",
        "http://[fe80::1]/",
        "http://224.0.0.1/",
    ],
)
async def test_a_redirect_to_a_refused_address_is_refused(site: str, target: str) -> None:
    """The first hop is allowed (127.0.0.1); the redirect is checked on its own and refused
    before anything is sent to it, so no real network is touched."""
    with pytest.raises(FetchRefused, match="refused"):
        await guarded_fetch(f"{site}/redirect?to={target}", LOOPBACK_ALLOWED)
    assert [hit.split("?")[0] for hit in Site.hits] == ["/redirect"]


async def test_a_redirect_to_loopback_is_refused_when_only_a_name_is_allowed(site: str) -> None:
    """`localhost` is allowed by name; its address is not, so a redirect to the bare
    127.0.0.1 is refused. The first request went to the checked address with the name in Host."""
    port = urlsplit(site).port
    policy = FetchPolicy.from_config(FetchConfig(allow=["localhost"], timeout_s=5))
    with pytest.raises(FetchRefused, match="loopback"):
        await guarded_fetch(
            f"http://localhost:{port}/redirect?to=http://127.0.0.1:{port}/page", policy
        )
    assert Site.hosts == [f"localhost:{port}"]


async def test_a_name_that_resolves_to_loopback_is_refused() -> None:
    """The check happens after DNS: a harmless-looking name pointing inside is refused."""
    with pytest.raises(FetchRefused, match="localhost is a loopback address"):
        await checked_address("http://localhost/", FetchPolicy())


async def test_redirects_are_followed_and_capped(site: str) -> None:
    hop = f"{site}/redirect?to={site}/page"
    result = await guarded_fetch(f"{site}/redirect?to={hop}", LOOPBACK_ALLOWED)
    assert result.status == 200 and len(result.redirects) == 2
    one = FetchPolicy.from_config(FetchConfig(allow=["127.0.0.1"], max_redirects=1))
    with pytest.raises(FetchError, match="more than 1 redirects"):
        await guarded_fetch(f"{site}/redirect?to={hop}", one)


@pytest.mark.parametrize("path", ["/big", "/declared"])
async def test_a_50_mb_body_is_cut_at_the_cap(site: str, path: str) -> None:
    policy = FetchPolicy.from_config(
        FetchConfig(allow=["127.0.0.1"], max_bytes=2 * MB, timeout_s=10)
    )
    started = time.monotonic()
    with pytest.raises(FetchTooLarge, match="2,000,000"):
        await guarded_fetch(f"{site}{path}", policy)
    assert time.monotonic() - started < 5


async def test_a_slow_body_stops_at_the_deadline(site: str) -> None:
    """Each byte comes before any read timeout would fire; only the total deadline stops it."""
    policy = FetchPolicy.from_config(FetchConfig(allow=["127.0.0.1"], timeout_s=1.0))
    started = time.monotonic()
    with pytest.raises(FetchTimeout, match="within 1 s"):
        await guarded_fetch(f"{site}/slow", policy)
    assert time.monotonic() - started < 3


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.org/x", "gopher://x/", "http:///nohost"]
)
async def test_only_http_and_https_urls_are_fetched(url: str) -> None:
    with pytest.raises(FetchRefused):
        await guarded_fetch(url, FetchPolicy())


async def test_credentials_in_the_url_are_refused() -> None:
    with pytest.raises(FetchRefused, match="user name"):
        await guarded_fetch("http://user:pw@example.org/", FetchPolicy())


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.0.1", "private"),
        ("fc00::1", "private"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("::ffff:169.254.169.254", "metadata"),
        ("::ffff:192.168.0.1", "private"),
        ("2002:7f00:1::1", "loopback"),  # 6to4 around 127.0.0.1
        ("100.64.0.1", "public"),  # carrier-grade NAT: shared, not public
    ],
)
def test_refused_addresses_name_their_kind(address: str, reason: str) -> None:
    assert reason in (refusal_reason(ipaddress.ip_address(address)) or "")


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert refusal_reason(ipaddress.ip_address(address)) is None


def test_the_allow_list_is_validated() -> None:
    with pytest.raises(ValueError, match="neither a host name"):
        FetchConfig(allow=["http://x/"])
    policy = FetchPolicy.from_config(FetchConfig(allow=["10.0.0.0/8", "Wiki.LAN"]))
    assert policy.allow_hosts == frozenset({"wiki.lan"})
    assert policy.allows_address(ipaddress.ip_address("10.9.9.9"))


async def test_the_request_goes_to_the_checked_address_with_the_name_kept() -> None:
    """What is connected to is the address that was checked (no second DNS lookup that a
    rebinding name could answer differently); Host and TLS's SNI keep the name."""
    import httpx

    async with httpx.AsyncClient() as client:
        request = pinned_request(
            client, "https://example.org:8443/a?b=1", ipaddress.ip_address("93.184.215.14")
        )
    assert str(request.url) == "https://93.184.215.14:8443/a?b=1"
    assert request.headers["Host"] == "example.org:8443"
    assert request.extensions["sni_hostname"] == "example.org"
