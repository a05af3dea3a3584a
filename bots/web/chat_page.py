"""The dashboard's chat page: `GET /chat/<name>` shows the chat `web:<name>` and a box to
write in; `POST /chat/<name>` (a form with the session's CSRF token, or a bearer token)
sends a message and answers with server-sent events: `partial` (the reply so far, as it
grows), then `reply` or `error` (the final text). Each `data:` is JSON `{"text": …}`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from bots.web.auth import checked_form
from bots.web.chat import (
    CHANNEL,
    DEFAULT_CHAT,
    MAX_MESSAGE_CHARS,
    ChatEvent,
    WebChatChannel,
    valid_chat_name,
)
from bots.web.dashboard import Dashboard
from bots.web.pages import Pages

HISTORY_SHOWN = 100


class ChatPage:
    def __init__(self, dashboard: Dashboard, pages: Pages, channel: WebChatChannel) -> None:
        self.dashboard = dashboard
        self.pages = pages
        self.channel = channel

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/chat", self.default_chat, methods=["GET"]),
            Route("/chat/{name}", self.page, methods=["GET"]),
            Route("/chat/{name}", self.post, methods=["POST"]),
        ]

    async def default_chat(self, request: Request) -> Response:
        return RedirectResponse(f"/chat/{DEFAULT_CHAT}", status_code=303)

    async def page(self, request: Request) -> Response:
        name = _chat_name(request)
        chat = self.dashboard.sessions.find_chat(CHANNEL, name)
        history = self.dashboard.sessions.history(chat.id) if chat is not None else []
        shown = [m for m in history if m.role in ("user", "assistant") and m.content]
        return self.pages.render(
            request, "chat.html", chat_name=name, chat=chat, messages=shown[-HISTORY_SHOWN:],
            page_id="chat", streaming=self.channel.streaming,
        )  # fmt: skip

    async def post(self, request: Request) -> Response:
        name = _chat_name(request)
        form = await checked_form(request)
        text = str(form.get("text", "")).replace("\r\n", "\n").strip()
        if not text:
            raise HTTPException(422, "write a message first")
        if len(text) > MAX_MESSAGE_CHARS:
            raise HTTPException(413, f"a message may have at most {MAX_MESSAGE_CHARS} characters")
        return StreamingResponse(
            _server_sent(self.channel.ask(name, text)),
            media_type="text/event-stream",
            headers={"X-Accel-Buffering": "no"},  # a proxy in front must not hold it back
        )


def _chat_name(request: Request) -> str:
    name = str(request.path_params["name"])
    if not valid_chat_name(name):
        raise HTTPException(404, "a chat's name has 1 to 40 letters, digits, - or _")
    return name


async def _server_sent(events: AsyncIterator[ChatEvent]) -> AsyncIterator[str]:
    async for event in events:
        yield f"event: {event.kind}\ndata: {json.dumps({'text': event.text})}\n\n"
