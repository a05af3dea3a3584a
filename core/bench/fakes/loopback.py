"""Real HTTP on 127.0.0.1 for the fakes of remote APIs (OpenAI, Telegram Bot API).

`LoopbackServer` runs a `ThreadingHTTPServer` on a free port in a daemon thread while
used as a context manager; `JsonHandler` is the request handler base: silent, with
helpers to read a body and send an answer (JSON or any) to a client that may have hung up.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class JsonHandler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def send_json(self, status: int, body: str) -> None:
        self.send_body(status, body.encode("utf-8"), "application/json")

    def send_body(self, status: int, data: bytes, content_type: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped waiting (a timeout, or polling cancelled at shutdown)


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # 50 chats calling at once must not wait for the backlog (5)


class LoopbackServer:
    """Serves `handler` on 127.0.0.1 between `__enter__` and `__exit__`.

    `__exit__` waits for the serving loop to notice the shutdown, up to `poll_interval`:
    short, because a test stops its fakes at every teardown (socketserver's 0.5 s default
    cost the suite minutes)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], poll_interval: float = 0.01):
        self._server = _Server(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": poll_interval},
            daemon=True,
        )

    @property
    def origin(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
