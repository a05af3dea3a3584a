"""The dashboard's front door: the Host names it answers to (DNS rebinding), how fast one
client may guess the token (`LoginThrottle`), the warning for a bind beyond loopback, and
the token a start without one configured makes.

A page on `evil.example` whose name is re-pointed at 127.0.0.1 reaches the dashboard as
the same origin, so the Origin check alone cannot see it; its requests still say
`Host: evil.example`, which is refused here. Loopback names are always allowed; a name a
proxy forwards goes in `[web] allowed_hosts`.
"""

from __future__ import annotations

import ipaddress
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
FREE_FAILURES = 5  # wrong tokens a client may send before it must wait
FIRST_WAIT_S = 1.0  # then 1 s, 2 s, 4 s … per further failure
MAX_WAIT_S = 15 * 60.0
MAX_CLIENTS = 4096  # clients remembered (the oldest forgotten first)


def is_loopback(host: str) -> bool:
    """Whether binding to `host` keeps the dashboard on this machine."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name of a Host header, without its port: `[::1]:8765` → `::1`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """Loopback's names, the address bound when it names one (not 0.0.0.0 or ::), and the
    configured extra names."""
    names = {*LOOPBACK_NAMES, *(name.lower() for name in extra)}
    address = bound.strip("[]").lower()
    if address not in ("", "0.0.0.0", "::"):
        names.add(address)
    return frozenset(names)


def plain_http_warning(host: str, behind_tls: bool) -> str | None:
    """What to say when the dashboard listens beyond this machine over plain HTTP."""
    if is_loopback(host) or behind_tls:
        return None
    return (
        f"WARNING: the dashboard listens on {host}, reachable from other machines, over plain"
        " HTTP: its token and every page (memories, messages) cross the network unencrypted."
        " Bind it to 127.0.0.1 and use an SSH tunnel, or put a TLS proxy in front (add its"
        " name to [web] allowed_hosts and set [web] behind_tls = true)."
    )


@dataclass
class _Failures:
    count: int = 0
    wait_until: float = 0.0


class LoginThrottle:
    """Failed logins per client: after FREE_FAILURES, each failure makes the client wait
    twice as long as the last (up to MAX_WAIT_S); a login while it waits is refused without
    looking at the token, and a good one clears its record."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._clients: OrderedDict[str, _Failures] = OrderedDict()

    def retry_after(self, client: str) -> int:
        """Seconds `client` must still wait before trying a token (0: it may try now)."""
        failures = self._clients.get(client)
        if failures is None:
            return 0
        return max(0, math.ceil(failures.wait_until - self.clock()))

    def failed(self, client: str) -> int:
        """Record a wrong token from `client`; return the seconds it must now wait."""
        failures = self._clients.pop(client, None) or _Failures()
        self._clients[client] = failures
        while len(self._clients) > MAX_CLIENTS:
            self._clients.popitem(last=False)
        failures.count += 1
        beyond = failures.count - FREE_FAILURES
        if beyond > 0:
            wait = min(MAX_WAIT_S, FIRST_WAIT_S * 2 ** min(beyond - 1, 30))
            failures.wait_until = self.clock() + wait
        return self.retry_after(client)

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)


def new_token() -> str:
    """A dashboard token for a start without one configured."""
    return secrets.token_urlsafe(18)
