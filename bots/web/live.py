"""The inspector's live turn of a chat: `GET /chats/<id>/live` shows the turn in progress
(or the last one), and `GET /chats/<id>/live/events` streams it as server-sent events
while it runs.

The turn may run in another process (`mnemo run` writes `live_turns`, `mnemo web` reads
it), so the stream polls the chat's row (`core.turn.live`) every `POLL_S` and sends a
`turn` event, JSON `LiveView.to_dict()`, each time it changed. It ends once the turn is
over (its last state sent) or after `STREAM_S`; the browser's `EventSource` reconnects
after `RETRY_MS`, so an open page follows the next turn too. Reads only.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from bots.web.dashboard import Dashboard
from bots.web.pages import Pages
from core.api import Chat
from core.turn.live import LiveView

POLL_S = 0.25
STREAM_S = 60.0
RETRY_MS = 2_000


class LivePage:
    def __init__(self, dashboard: Dashboard, pages: Pages, poll_s: float = POLL_S) -> None:
        self.dashboard = dashboard
        self.pages = pages
        self.poll_s = poll_s

    async def page(self, request: Request, chat: Chat) -> Response:
        view = self.dashboard.live_turn_of(chat)
        return self.pages.chat_page(request, chat, "live.html", "live", view=view)

    async def events(self, request: Request, chat: Chat) -> Response:
        return StreamingResponse(
            self._stream(request, chat),
            media_type="text/event-stream",
            headers={"X-Accel-Buffering": "no"},
        )

    async def _stream(self, request: Request, chat: Chat) -> AsyncIterator[str]:
        yield f"retry: {RETRY_MS}\n\n"
        sent = ""
        loop = asyncio.get_running_loop()
        until = loop.time() + STREAM_S
        while loop.time() < until and not await request.is_disconnected():
            view = self.dashboard.live_turn_of(chat)
            data = _event_data(view)
            if data != sent:
                sent = data
                yield f"event: turn\ndata: {data}\n\n"
            if view is None or view.state != "running":
                return
            await asyncio.sleep(self.poll_s)


def _event_data(view: LiveView | None) -> str:
    return json.dumps(view.to_dict() if view is not None else {"state": "none"})
