"""A fake of the two Discord REST endpoints `mnemo init` calls, on 127.0.0.1.

`GET /users/@me` and `GET /applications/@me` with `Authorization: Bot <token>`, answered
as Discord does: the bot user and the application (whose `flags` carry the message
content intent), or 401 `{"message": "401: Unauthorized", "code": 0}` for a bad token.
Pass `server.base_url` where the real one is https://discord.com/api/v10.
"""

from __future__ import annotations

import json
from typing import Any

from core.bench.fakes.loopback import JsonHandler, LoopbackServer

GATEWAY_MESSAGE_CONTENT = 1 << 18
UNAUTHORIZED = json.dumps({"message": "401: Unauthorized", "code": 0})


class FakeDiscordAPI(LoopbackServer):
    """`with FakeDiscordAPI(tokens={"good"}) as api:`; `api.base_url` ends in /api/v10."""

    def __init__(self, tokens: set[str], content_intent: bool = True) -> None:
        self.tokens = tokens
        self.content_intent = content_intent
        super().__init__(self._handler_class())

    @property
    def base_url(self) -> str:
        return f"{self.origin}/api/v10"

    def answer(self, path: str, authorization: str) -> tuple[int, str]:
        if authorization.removeprefix("Bot ") not in self.tokens:
            return 401, UNAUTHORIZED
        body: dict[str, Any]
        if path == "/api/v10/users/@me":
            body = {"id": "1130000000000000001", "username": "mnemo-bot", "bot": True}
        elif path == "/api/v10/applications/@me":
            flags = GATEWAY_MESSAGE_CONTENT if self.content_intent else 0
            body = {"id": "1130000000000000001", "name": "Mnemo", "flags": flags}
        else:
            return 404, json.dumps({"message": "404: Not Found", "code": 0})
        return 200, json.dumps(body)

    def _handler_class(self) -> type[JsonHandler]:
        server = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                auth = self.headers.get("Authorization") or ""
                self.send_json(*server.answer(self.path.rstrip("/"), auth))

        return Handler
