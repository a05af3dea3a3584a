"""The dashboard served by uvicorn inside the caller's event loop, as a `Service`.

uvicorn normally owns the process's signals; here the host (`mnemo run`'s platform, or
`mnemo web`) does, so the server is told to leave them alone and is stopped by
cancelling its task, after which it closes its sockets cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator

import uvicorn
from starlette.types import ASGIApp


class _GuestServer(uvicorn.Server):
    """A uvicorn server that installs no signal handlers (its host has its own)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class WebService:
    """Serves the app built by `app_factory` on `host:port` until cancelled."""

    name = "web"

    def __init__(self, app_factory: Callable[[], ASGIApp], host: str, port: int) -> None:
        self.app_factory = app_factory
        self.host = host
        self.port = port
        self._socket: socket.socket | None = None

    def bind(self) -> str:
        """Open the listening socket now (port 0: any free one); return the base URL."""
        if self._socket is None:
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            self._socket = socket.create_server((self.host, self.port), family=family)
            self.port = int(self._socket.getsockname()[1])
        return self.url

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def run(self) -> None:
        self.bind()
        assert self._socket is not None
        config = uvicorn.Config(
            self.app_factory(),
            log_config=None,
            access_log=False,
            lifespan="off",
            log_level="warning",
        )
        server = _GuestServer(config)
        serving = asyncio.ensure_future(server.serve(sockets=[self._socket]))
        try:
            await asyncio.shield(serving)
        except asyncio.CancelledError:
            server.should_exit = True  # finish open requests, close the sockets
            await serving
            raise
        finally:
            self._socket.close()
            self._socket = None
