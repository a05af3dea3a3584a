"""A fake Telegram Bot API server on 127.0.0.1 for the Telegram tests and benchmarks.

It speaks the real wire protocol (form-encoded POSTs to /bot<token>/<method>, JSON
answers `{"ok": ..., "result": ...}`), so python-telegram-bot runs unmodified against it.
Tests queue updates with `push_message()`, script failures with `fail_next()` and read
what the bot sent from `calls`. Like the real server, getUpdates with `offset=N` confirms
and forgets every update below N, and a 429 carries `parameters.retry_after`.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from core.testing.loopback import JsonHandler, LoopbackServer

BOT_ID = 777000111
BOT_USERNAME = "mnemo_test_bot"
JSON_FIELDS = {"entities", "commands", "reply_parameters", "allowed_updates", "reply_markup"}
MAX_LONG_POLL_S = 1.0
MAX_UPDATES = 100  # getUpdates' `limit` when none is given (and its maximum)


@dataclass(frozen=True)
class Call:
    method: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Failure:
    status: int
    description: str
    retry_after: int | None = None


def user(user_id: int, first_name: str, username: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
    if username:
        found["username"] = username
    return found


BOT_USER = {"id": BOT_ID, "is_bot": True, "first_name": "Mnemo", "username": BOT_USERNAME}


class FakeTelegramServer(LoopbackServer):
    """Start with `with FakeTelegramServer() as tg:`; pass `tg.base_url` as `api_base_url`."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.delivered: list[dict[str, Any]] = []  # the messages sendMessage accepted
        self.updates: list[dict[str, Any]] = []
        self.reject_entities = False
        self.reads_all_group_messages = False  # getMe: False while BotFather's privacy mode is on
        self._failures: dict[str, list[Failure | None]] = {}
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1000)
        self._changed = threading.Condition()
        super().__init__(self._handler_class(), poll_interval=0.05)

    @property
    def base_url(self) -> str:
        return f"{self.origin}/bot"

    @property
    def file_url(self) -> str:
        return f"{self.origin}/file/bot"

    # --- scripting -----------------------------------------------------------------

    def push_message(
        self,
        chat: dict[str, Any],
        sender: dict[str, Any],
        text: str = "",
        **fields: Any,
    ) -> int:
        """Queue a `message` update; returns its message_id. `fields` go into the message."""
        message_id = next(self._message_ids)
        message: dict[str, Any] = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": chat,
            "from": sender,
            **fields,
        }
        if text:
            message["text"] = text
        self.push_update({"message": message})
        return message_id

    def push_update(self, update: dict[str, Any]) -> int:
        """Queue a raw update (any fields, even ones Telegram would never send); returns its id."""
        with self._changed:
            update_id = next(self._update_ids)
            self.updates.append({"update_id": update_id, **update})
            self._changed.notify_all()
            return update_id

    def fail_next(
        self,
        method: str,
        status: int,
        description: str,
        times: int = 1,
        *,
        after: int = 0,
        retry_after: int | None = None,
    ) -> None:
        """After `after` more calls of `method` answered normally, the next `times` answer with
        this error; `retry_after` (with status 429) says how many seconds to wait."""
        failure = Failure(status, description, retry_after)
        with self._changed:
            self._failures.setdefault(method, []).extend([None] * after + [failure] * times)

    def sent(self, method: str = "sendMessage") -> list[dict[str, Any]]:
        with self._changed:
            return [call.params for call in self.calls if call.method == method]

    def wait_for(self, ready: Callable[[FakeTelegramServer], bool], timeout: float = 20) -> None:
        """Block until `ready(self)` holds after some call, or fail after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not ready(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    methods = [call.method for call in self.calls]
                    raise AssertionError(f"fake Telegram: condition not met; calls: {methods}")
                self._changed.wait(left)

    # --- the Bot API ---------------------------------------------------------------

    def answer(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._changed:
            self.calls.append(Call(method, params))
            self._changed.notify_all()
            failures = self._failures.get(method)
            failure = failures.pop(0) if failures else None
            if failure is not None:
                error = _error(failure.status, failure.description, failure.retry_after)
                return failure.status, error
        if method == "getUpdates":
            return 200, {"ok": True, "result": self._updates(params)}
        if method == "getMe":
            return 200, {"ok": True, "result": self._me()}
        if method in {"deleteWebhook", "setWebhook", "setMyCommands", "sendChatAction"}:
            return 200, {"ok": True, "result": True}
        if method == "sendMessage":
            return self._send_message(params)
        return 404, _error(404, "Not Found: method not found")

    def _me(self) -> dict[str, Any]:
        return {
            **BOT_USER,
            "can_join_groups": True,
            "can_read_all_group_messages": self.reads_all_group_messages,
            "supports_inline_queries": False,
        }

    def _updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Updates from `offset` on, at most `limit`; those below `offset` are confirmed and
        dropped for good, so an update is seen again only while its offset is not passed."""
        offset = int(params.get("offset") or 0)
        limit = min(int(params.get("limit") or MAX_UPDATES), MAX_UPDATES)
        wait = min(float(params.get("timeout") or 0), MAX_LONG_POLL_S)
        deadline = time.monotonic() + wait
        with self._changed:
            if offset < 0:  # the last -offset updates; all before them are forgotten
                self.updates = self.updates[offset:]
            else:
                self.updates = [u for u in self.updates if u["update_id"] >= offset]
            while True:
                left = deadline - time.monotonic()
                if self.updates or left <= 0:
                    return self.updates[:limit]
                self._changed.wait(left)

    def _send_message(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        text = str(params.get("text", ""))
        if not text.strip():
            return 400, _error(400, "Bad Request: message text is empty")
        if len(text.encode("utf-16-le")) // 2 > 4096:
            return 400, _error(400, "Bad Request: message is too long")
        if params.get("entities") and self.reject_entities:
            return 400, _error(
                400, "Bad Request: can't parse entities: Can't find end of the entity"
            )
        chat_id = int(params["chat_id"])
        chat = {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"}
        message = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": chat,
            "from": BOT_USER,
            "text": text,
        }
        with self._changed:
            self.delivered.append(message)
            self._changed.notify_all()
        return 200, {"ok": True, "result": message}

    def _handler_class(self) -> type[JsonHandler]:
        server = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                body = self.read_body().decode("utf-8")
                method = self.path.rstrip("/").rsplit("/", 1)[-1]
                status, answer = server.answer(method, _form(body, self.headers))
                self.send_json(status, json.dumps(answer))

            do_GET = do_POST

        return Handler


def _form(body: str, headers: Any) -> dict[str, Any]:
    """Parameters of a Bot API request; JSON-valued fields decoded as the real server does."""
    if "application/json" in (headers.get("Content-Type") or ""):
        loaded: dict[str, Any] = json.loads(body or "{}")
        return loaded
    params: dict[str, Any] = {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}
    for key in JSON_FIELDS & params.keys():
        params[key] = json.loads(params[key])
    return params


def _error(status: int, description: str, retry_after: int | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        error["parameters"] = {"retry_after": retry_after}
    return error
