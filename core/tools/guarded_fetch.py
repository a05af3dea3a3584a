"""The guarded HTTP fetch: one GET of a URL that a user or a model named, made safe to run
on a server (web tools, `mnemo skills add URL`).

- Only `http` and `https`.
- The host is resolved here, every address is checked, and the connection goes to the
  checked address (the URL keeps the name in `Host` and in TLS's SNI and certificate
  check), so a DNS answer that changes between the check and the connect (rebinding)
  cannot reach a refused address.
- Refused unless `[fetch] allow` names them: loopback, private (10/8, 172.16/12,
  192.168/16, fc00::/7, 100.64/10), link-local (169.254/16, fe80::/10, which holds the
  cloud metadata address 169.254.169.254), multicast, unspecified and reserved addresses,
  the same addresses wrapped in IPv6 (::ffff:10.0.0.1, 6to4, Teredo), and fd00:ec2::254.
- Redirects are followed by hand, each one checked the same way, up to `max_redirects`.
- One deadline covers everything (resolution, connects, redirects, a body that trickles);
  the body is streamed and reading stops at `max_bytes`.
- A caller may name the content types it reads (`content_types`); any other type is
  refused from the headers, before the body is read.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

import httpx

from core.config import FetchConfig
from core.errors import FetchError, FetchRefused, FetchTimeout, FetchTooLarge

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
REDIRECTS = {301, 302, 303, 307, 308}
METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
USER_AGENT = "Mnemo/0.1 (+guarded fetch)"


@dataclass(frozen=True)
class FetchResult:
    """What came back: the final URL (after redirects), its status, type and body."""

    url: str
    status: int
    content_type: str
    body: bytes
    redirects: list[str] = field(default_factory=list)

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class FetchPolicy:
    """`[fetch]` as the guard uses it: allowed names and networks, and the three caps."""

    allow_hosts: frozenset[str] = frozenset()
    allow_networks: tuple[Network, ...] = ()
    max_bytes: int = 5_000_000
    timeout_s: float = 20.0
    max_redirects: int = 5
    # Media types the caller reads (empty: any): `text/` matches a prefix, `+json` a
    # suffix, anything else exactly. A missing Content-Type passes (the caller sniffs).
    content_types: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: FetchConfig) -> FetchPolicy:
        hosts: set[str] = set()
        networks: list[Network] = []
        for entry in config.allow:
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(
            frozenset(hosts),
            tuple(networks),
            config.max_bytes,
            config.timeout_s,
            config.max_redirects,
        )

    def allows_address(self, address: IPAddress) -> bool:
        return any(address in network for network in self.allow_networks)

    def reads_type(self, content_type: str) -> bool:
        """Whether a body of `content_type` is one the caller reads."""
        media = media_type(content_type)
        if not self.content_types or not media:
            return True
        return any(
            media.startswith(kind) if kind.endswith("/")
            else media.endswith(kind) if kind.startswith("+")
            else media == kind
            for kind in self.content_types
        )  # fmt: skip


def media_type(content_type: str) -> str:
    """`text/html; charset=utf-8` → `text/html`."""
    return content_type.split(";", 1)[0].strip().lower()


def unwrap(address: IPAddress) -> IPAddress:
    """The IPv4 address inside an IPv4-mapped, 6to4 or Teredo IPv6 address, else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is not None:
            return inner
        if address.teredo is not None:
            return address.teredo[1]
    return address


def refusal_reason(address: IPAddress) -> str | None:
    """Why the guard refuses `address` (None: a public address it lets through).

    A wrapped IPv4 address (::ffff:a.b.c.d, 6to4) is judged by the IPv4 address inside;
    Teredo (2001::/32) is never public, whatever it wraps."""
    inner = unwrap(address)
    wrapped = isinstance(address, ipaddress.IPv6Address) and (
        address.ipv4_mapped is not None or address.sixtofour is not None
    )
    for candidate in [inner] if wrapped else [address, inner]:
        if candidate in METADATA:
            return "a cloud metadata address"
        checks = [
            (candidate.is_unspecified, "an unspecified address"),
            (candidate.is_loopback, "a loopback address"),
            (candidate.is_link_local, "a link-local address"),
            (candidate.is_multicast, "a multicast address"),
            (candidate.is_private, "a private address"),
            (candidate.is_reserved, "a reserved address"),
            (not candidate.is_global, "not a public address"),
        ]
        for refused, reason in checks:
            if refused:
                return reason
    return None


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


async def _resolve(host: str, port: int) -> list[IPAddress]:
    literal = _literal(host)
    if literal is not None:
        return [literal]
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise FetchError(f"cannot resolve {host}: {exc.strerror}") from None
    found = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    # IPv4 first: most loopback test servers and many hosts answer there only.
    return sorted(dict.fromkeys(found), key=lambda a: a.version)


async def checked_address(url: str, policy: FetchPolicy) -> IPAddress:
    """The address to connect to for `url`, after checking the scheme and every address
    its host resolves to; FetchRefused if any of them is refused."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise FetchRefused(f"{url!r}: only http and https URLs can be fetched")
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        raise FetchRefused(f"{url!r} names no host")
    if parts.username or parts.password:
        raise FetchRefused(f"{url!r}: URLs with a user name or password are refused")
    addresses = await _resolve(host, parts.port or (443 if parts.scheme == "https" else 80))
    if not addresses:
        raise FetchError(f"{host} resolves to no address")
    if host in policy.allow_hosts:
        return addresses[0]
    for address in addresses:
        reason = refusal_reason(address)
        if reason is not None and not policy.allows_address(address):
            raise FetchRefused(
                f"{host} is {reason} ({address}); fetching it is refused "
                "unless [fetch] allow names it"
            )
    return addresses[0]


def pinned_request(client: httpx.AsyncClient, url: str, address: IPAddress) -> httpx.Request:
    """A GET of `url` sent to `address`: the URL's host stays in Host and in TLS (SNI)."""
    parsed = httpx.URL(url)
    request = client.build_request(
        "GET",
        parsed.copy_with(host=str(address)),
        headers={"Host": parsed.netloc.decode("ascii"), "User-Agent": USER_AGENT},
        extensions={"sni_hostname": parsed.host},
    )
    return request


async def _read_capped(response: httpx.Response, max_bytes: int) -> bytes:
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise FetchTooLarge(f"the body is {int(declared):,} bytes; the cap is {max_bytes:,}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise FetchTooLarge(f"the body is over the cap of {max_bytes:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _follow(client: httpx.AsyncClient, url: str, policy: FetchPolicy) -> FetchResult:
    redirects: list[str] = []
    while True:
        address = await checked_address(url, policy)
        request = pinned_request(client, url, address)
        try:
            response = await client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise FetchError(f"{url}: {exc.__class__.__name__}: {exc}") from None
        try:
            location = response.headers.get("Location")
            if response.status_code in REDIRECTS and location:
                if len(redirects) >= policy.max_redirects:
                    raise FetchError(f"{url}: more than {policy.max_redirects} redirects")
                url = urljoin(url, location)
                redirects.append(url)
                continue
            content_type = response.headers.get("Content-Type", "")
            if not policy.reads_type(content_type):
                raise FetchRefused(
                    f"{url} is {media_type(content_type)}, which is refused: only "
                    f"{', '.join(policy.content_types)} are read"
                )
            body = await _read_capped(response, policy.max_bytes)
        except httpx.HTTPError as exc:
            raise FetchError(f"{url}: {exc.__class__.__name__}: {exc}") from None
        finally:
            await response.aclose()
        return FetchResult(url, response.status_code, content_type, body, redirects)


async def guarded_fetch(url: str, policy: FetchPolicy) -> FetchResult:
    """GET `url` under the guard; a status ≥ 400 is returned, not raised (callers decide).

    Raises FetchRefused, FetchTooLarge, FetchTimeout or FetchError, each with a message a
    user or a model can act on.
    """
    timeout = httpx.Timeout(policy.timeout_s)
    try:
        async with (
            asyncio.timeout(policy.timeout_s),
            httpx.AsyncClient(timeout=timeout, follow_redirects=False, trust_env=False) as client,
        ):
            return await _follow(client, url, policy)
    except TimeoutError:
        raise FetchTimeout(f"{url}: no complete answer within {policy.timeout_s:g} s") from None
