"""WebExtension: the dashboard as a service of a running bot, over that bot's own parts.

Registered last, it finds memory and the reflector among the extensions registered
before it, so the dashboard ranks with the very keeper (model, caches) the turns use.
Building it costs nothing until it serves: the web libraries load then.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from core.api import Extension, Service
from core.turn.hooks import Host

if TYPE_CHECKING:
    from bots.web.chat import WebChatChannel
    from bots.web.dashboard import Dashboard
    from bots.web.service import WebService

logger = logging.getLogger(__name__)


class WebExtension(Extension):
    name = "web"

    def __init__(self, host: Host) -> None:
        self.host = host
        configured = host.config.web.token
        if configured:
            self.token, self.token_generated = configured, False
        else:
            from bots.web.door import new_token  # not auth: starlette waits for the server

            self.token, self.token_generated = new_token(), True
        self._dashboard: Dashboard | None = None
        self._chat: WebChatChannel | None = None

    def chat_channel(self) -> WebChatChannel:
        """The channel of the dashboard's chat page (`web:<name>` chats); attach it to the
        dispatcher for the page to answer."""
        if self._chat is None:
            from bots.web.chat import WebChatChannel

            self._chat = WebChatChannel(streaming=self.host.config.web.chat_streaming)
        return self._chat

    def dashboard(self) -> Dashboard:
        if self._dashboard is None:
            from bots.web.dashboard import Dashboard
            from bots.web.dashboard_store import DatabaseDashboardStore
            from memory.extension import MemoryExtension
            from memory.stores import strategy_store
            from reflector.extension import ReflectorExtension

            host = self.host
            memory = next(e for e in host.extensions if isinstance(e, MemoryExtension))
            reflector = next(e for e in host.extensions if isinstance(e, ReflectorExtension))
            self._dashboard = Dashboard(
                config=host.config,
                sessions=host.store,
                store=DatabaseDashboardStore(host.storage.database),
                keeper=memory.keeper,
                strategies=strategy_store(host.storage),
                runs=reflector.reflector.runs,
                cursor=reflector.reflector.cursor,
                extensions=host.extensions,
                planner=host.planner,
                llm=host.llm,
                storage=host.storage,
            )
        return self._dashboard

    def service(self, host: str | None = None, port: int | None = None) -> WebService:
        """The dashboard's server on `host:port` (default: `[web] host` and `port`)."""
        from bots.web.app import build_app
        from bots.web.door import allowed_hosts
        from bots.web.service import WebService

        web = self.host.config.web
        bound = web.host if host is None else host
        names = allowed_hosts(bound, web.allowed_hosts)
        return WebService(
            lambda: build_app(self.dashboard(), self.token, names, chat=self._chat),
            bound,
            web.port if port is None else port,
        )

    def announce(self, url: str, host: str = "127.0.0.1") -> None:
        """Say where the dashboard is; a generated token is printed (never logged); a bind
        beyond loopback without TLS in front gets a loud warning."""
        from bots.web.door import plain_http_warning

        logger.info("dashboard at %s", url)
        warning = plain_http_warning(host, self.host.config.web.behind_tls)
        if warning is not None:
            logger.warning("%s", warning)
            sys.stderr.write(f"\n{'!' * 78}\nmnemo web: {warning}\n{'!' * 78}\n\n")
        if self.token_generated:
            sys.stderr.write(
                f"mnemo web: {url}/  token (random for this start; set [web] token or"
                f" MNEMO_WEB_TOKEN to keep one): {self.token}\n"
            )
        sys.stderr.flush()

    def services(self) -> list[Service]:
        if not self.host.config.web.enabled:
            return []
        return [_Announced(self)]


class _Announced:
    """The dashboard's service inside `mnemo run`: binds, says where it is, serves."""

    name = "web"

    def __init__(self, extension: WebExtension) -> None:
        self.extension = extension

    async def run(self) -> None:
        service = self.extension.service()
        self.extension.announce(service.bind(), service.host)
        await service.run()
