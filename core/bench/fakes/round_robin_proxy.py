"""A round-robin HTTP reverse proxy on 127.0.0.1: the load balancer of the multi-process tests.

Each request goes to the next backend in turn, as nginx's default `upstream` does; a
backend that does not answer (killed, not started yet) gets the client a 502, which the
fake Bot API retries like Telegram. Built on the same loopback server as the fakes, so a
test or benchmark starts it with `with RoundRobinProxy(urls) as proxy:`.
"""

from __future__ import annotations

import http.client
import itertools
import threading
from collections import Counter
from urllib.parse import urlsplit

from core.bench.fakes.loopback import JsonHandler, LoopbackServer

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}
TIMEOUT_S = 30.0


class RoundRobinProxy(LoopbackServer):
    """Forwards every request to `backends` (origins like `http://127.0.0.1:8001`) in turn."""

    def __init__(self, backends: list[str]) -> None:
        if not backends:
            raise ValueError("a proxy needs at least one backend")
        self.backends = [urlsplit(url) for url in backends]
        self.answered: Counter[str] = Counter()  # backend origin → requests it answered
        self._next = itertools.cycle(range(len(backends)))
        self._lock = threading.Lock()
        super().__init__(self._handler_class())

    def _pick(self) -> tuple[str, int, str]:
        with self._lock:
            backend = self.backends[next(self._next)]
        assert backend.hostname is not None and backend.port is not None
        return backend.hostname, backend.port, f"{backend.scheme}://{backend.netloc}"

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, bytes, str]:
        """The backend's status, body and content type; 502 when it did not answer."""
        host, port, origin = self._pick()
        connection = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S)
        try:
            connection.request(method, path, body=body, headers=headers)
            answer = connection.getresponse()
            data = answer.read()
        except OSError as exc:
            return 502, f"backend {origin} did not answer: {exc}".encode(), "text/plain"
        finally:
            connection.close()
        with self._lock:
            self.answered[origin] += 1
        return answer.status, data, answer.getheader("Content-Type") or "text/plain"

    def _handler_class(self) -> type[JsonHandler]:
        proxy = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                body = self.read_body()
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                status, data, kind = proxy.forward(self.command, self.path, headers, body)
                self.send_body(status, data, kind)

            do_GET = do_POST

        return Handler
