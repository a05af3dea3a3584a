"""A fake of the Discord API on 127.0.0.1: the REST calls Mnemo makes and the gateway.

REST: `GET /users/@me` and `GET /applications/@me` with `Authorization: Bot <token>`,
answered as Discord does (`mnemo init` reads the bot's name and the application's
`flags`, which carry the message content intent), or 401 for a bad token. For a running
bot it also answers (and records in `calls`) the application info, the bulk command sync
(`PUT /applications/{app}[/guilds/{guild}]/commands`), interaction callbacks
(`POST /interactions/{id}/{token}/callback`), follow-ups, messages sent and edited, and
typing. The gateway (`ws://…/gateway`, `core.bench.fakes.fake_discord_gateway`) sends
READY and one guild, then whatever the test dispatches: messages (their content blanked
as Discord does when the bot did not ask for the Message Content intent and is neither
mentioned nor in a DM) and interactions. Pass `server.base_url` where the real one is
https://discord.com/api/v10 and `server.gateway_url` for wss://gateway.discord.gg/.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from core.bench.fakes.fake_discord_gateway import GatewaySession, accept_key
from core.bench.fakes.fake_discord_payloads import (
    APP_ID,
    DiscordWorld,
    app_info,
    bot_user,
)
from core.bench.fakes.loopback import JsonHandler, LoopbackServer

GATEWAY_MESSAGE_CONTENT = 1 << 18
INTENT_MESSAGE_CONTENT = 1 << 15
UNAUTHORIZED = json.dumps({"message": "401: Unauthorized", "code": 0})
NOT_FOUND = json.dumps({"message": "404: Not Found", "code": 0})


@dataclass(frozen=True)
class Call:
    """One REST call the bot made: method, path (after /api/v10) and JSON body."""

    method: str
    path: str
    body: Any


class FakeDiscordAPI(LoopbackServer):
    """`with FakeDiscordAPI(tokens={"good"}) as api:`; `api.base_url` ends in /api/v10."""

    def __init__(self, tokens: set[str], content_intent: bool = True) -> None:
        self.tokens = tokens
        self.content_intent = content_intent
        self.world = DiscordWorld()
        self.calls: list[Call] = []
        self.sessions: list[GatewaySession] = []
        self.identified_intents: int | None = None
        self._ids = itertools.count(1170000000000000001)
        self._lock = threading.Lock()
        super().__init__(self._handler_class())

    @property
    def base_url(self) -> str:
        return f"{self.origin}/api/v10"

    @property
    def gateway_url(self) -> str:
        return self.origin.replace("http://", "ws://") + "/gateway"

    # --- what a test does -----------------------------------------------------------

    def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send a gateway event to every connected bot."""
        for session in self.sessions:
            if not session.closed:
                session.dispatch(event, data)

    def send_message(self, data: dict[str, Any]) -> None:
        """MESSAGE_CREATE, its content blanked as Discord blanks it for a bot without the
        Message Content intent (unless the message mentions the bot or is a DM)."""
        intents = self.identified_intents or 0
        mentioned = any(user["id"] == str(APP_ID) for user in data.get("mentions", []))
        if not intents & INTENT_MESSAGE_CONTENT and "guild_id" in data and not mentioned:
            data = {**data, "content": ""}
        self.dispatch("MESSAGE_CREATE", data)

    def calls_to(self, method: str, prefix: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.method == method and c.path.startswith(prefix)]

    def wait_for(
        self, method: str, prefix: str, count: int = 1, timeout_s: float = 5.0
    ) -> list[Call]:
        """The calls made so far once there are `count` (AssertionError after the timeout)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.calls_to(method, prefix)
            if len(found) >= count:
                return found
            time.sleep(0.01)
        raise AssertionError(
            f"{count} {method} {prefix}… expected, got {self.calls_to(method, prefix)}"
        )

    # --- answers ----------------------------------------------------------------------

    def answer(self, method: str, path: str, authorization: str, body: Any) -> tuple[int, str]:
        path = path.split("?", 1)[0].rstrip("/").removeprefix("/api/v10")
        by_token = path.startswith(("/interactions/", "/webhooks/"))  # the URL's token is enough
        if not by_token and authorization.removeprefix("Bot ") not in self.tokens:
            return 401, UNAUTHORIZED
        with self._lock:
            self.calls.append(Call(method, path, body))
        status, answer = self._route(method, path, body)
        return status, "" if answer is None else json.dumps(answer)

    def _route(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        parts = path.strip("/").split("/")
        if method == "GET":
            return self._get(path)
        if method == "PUT" and parts[0] == "applications" and parts[-1] == "commands":
            return 200, [{**c, "id": str(next(self._ids)), "application_id": str(APP_ID),
                          "version": "1"} for c in body]  # fmt: skip
        if parts[0] == "interactions" and parts[-1] == "callback":
            return 200, self._callback(parts[1], body)
        if parts[0] == "webhooks" or (parts[0] == "channels" and parts[2:3] == ["messages"]):
            return self._message(method, parts, body)
        if parts[0] == "channels" and parts[-1] == "typing":
            return 204, None
        return 404, json.loads(NOT_FOUND)

    def _get(self, path: str) -> tuple[int, Any]:
        if path == "/users/@me":
            return 200, bot_user()
        if path == "/applications/@me":
            flags = GATEWAY_MESSAGE_CONTENT if self.content_intent else 0
            return 200, {"id": str(APP_ID), "name": "Mnemo", "flags": flags}
        if path == "/oauth2/applications/@me":
            return 200, app_info()
        if path == "/gateway/bot":
            limit = {"total": 1000, "remaining": 1000, "reset_after": 0, "max_concurrency": 1}
            return 200, {"url": self.gateway_url, "shards": 1, "session_start_limit": limit}
        return 404, json.loads(NOT_FOUND)

    def _callback(self, interaction_id: str, body: Any) -> dict[str, Any]:
        data = body.get("data") or {}
        interaction = {
            "id": interaction_id,
            "type": body["type"],
            "response_message_loading": body["type"] == 5,
            "response_message_ephemeral": bool((data.get("flags") or 0) & 64),
        }
        return {"interaction": interaction}

    def _message(self, method: str, parts: list[str], body: Any) -> tuple[int, Any]:
        if method == "DELETE":
            return 204, None
        channel_id = parts[1] if parts[0] == "channels" else str(self.world.channel_id)
        message_id = parts[3] if len(parts) > 3 and parts[3] != "@original" else None
        content = (body or {}).get("content", "")
        return 200, self.world.message(
            message_id or str(next(self._ids)), channel_id, content, bot_user()
        )

    def on_identify(self, data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        self.identified_intents = int(data.get("intents") or 0)
        return [("READY", self.world.ready()), ("GUILD_CREATE", self.world.guild())]

    def _handler_class(self) -> type[JsonHandler]:
        server = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/gateway") and self.headers.get("Upgrade"):
                    self._serve_gateway()
                    return
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

            def do_PUT(self) -> None:
                self._answer("PUT")

            def do_PATCH(self) -> None:
                self._answer("PATCH")

            def do_DELETE(self) -> None:
                self._answer("DELETE")

            def _answer(self, method: str) -> None:
                raw = self.read_body()
                body = json.loads(raw) if raw.strip().startswith((b"{", b"[")) else None
                auth = self.headers.get("Authorization") or ""
                status, text = server.answer(method, self.path, auth, body)
                if status == 204:
                    self.send_body(204, b"", "text/plain")
                else:
                    self.send_json(status, text)

            def _serve_gateway(self) -> None:
                self.send_response(101)
                self.send_header("Upgrade", "websocket")
                self.send_header("Connection", "Upgrade")
                self.send_header(
                    "Sec-WebSocket-Accept", accept_key(self.headers["Sec-WebSocket-Key"])
                )
                self.end_headers()
                self.wfile.flush()
                session = GatewaySession(self.connection, server.on_identify)
                server.sessions.append(session)
                session.serve()
                self.close_connection = True

        return Handler
