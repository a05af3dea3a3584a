"""A fake Telegram Bot API server on 127.0.0.1 for the Telegram tests and benchmarks.

It speaks the real wire protocol (form-encoded POSTs to /bot<token>/<method>, JSON
answers `{"ok": ..., "result": ...}`), so python-telegram-bot runs unmodified against it.
Tests queue updates with `push_message()`, script failures with `fail_next()` and read
what the bot sent from `calls`. Like the real server, getUpdates with `offset=N` confirms
and forgets every update below N, and a 429 carries `parameters.retry_after`.

After setWebhook, updates are POSTed to the webhook URL instead, with the secret in
`X-Telegram-Bot-Api-Secret-Token`, as Telegram does: one at a time per chat, in order
(several chats at once, up to `max_connections`), an update forgotten once its POST was
answered 2xx, and any other answer (or none) retried after `webhook_retry_s`;
getUpdates is refused (409) while a webhook is set.

Files (photos, voice notes) are added with `add_file()`; getFile answers their `file_path`
and a GET of `/file/bot<token>/<file_path>` serves their bytes, as the real server does.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import parse_qs

from core.bench.fakes.loopback import JsonHandler, LoopbackServer

BOT_ID = 777000111
BOT_USERNAME = "mnemo_test_bot"
JSON_FIELDS = {"entities", "commands", "reply_parameters", "allowed_updates", "reply_markup"}
MAX_LONG_POLL_S = 1.0
MAX_UPDATES = 100  # getUpdates' `limit` when none is given (and its maximum)
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
WEBHOOK_CONNECTIONS = 40  # Telegram's default max_connections
WEBHOOK_TIMEOUT_S = 10.0
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, always
WEBHOOK_CONFLICT = (
    "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to"
    " delete the webhook first"
)


@dataclass(frozen=True)
class Call:
    method: str
    params: dict[str, Any]
    at: float = 0.0  # time.monotonic() when it arrived


@dataclass(frozen=True)
class Webhook:
    url: str
    secret_token: str
    allowed_updates: tuple[str, ...]


@dataclass(frozen=True)
class WebhookPost:
    """One delivery attempt: the update, the answer's status (0: no answer)."""

    update_id: int
    status: int


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
        self.webhook: Webhook | None = None
        self.webhook_posts: list[WebhookPost] = []
        self.webhook_retry_s = 0.2  # Telegram waits longer; tests need not
        self._in_flight: set[int] = set()  # update ids being POSTed
        self._retry_at: dict[int, float] = {}  # update id → when its next POST may go
        self._closing = False
        self.files: dict[str, bytes] = {}  # file_id → bytes (getFile, /file/bot<token>/…)
        self._delivery = threading.Thread(target=self._deliver_forever, daemon=True)
        super().__init__(self._handler_class())

    def __enter__(self) -> Self:
        super().__enter__()
        self._delivery.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._delivery.join(timeout=WEBHOOK_TIMEOUT_S + 1)
        super().__exit__(*exc)

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

    def add_file(self, data: bytes, suffix: str = ".jpg") -> dict[str, Any]:
        """Store a file; returns the fields a message's photo size, voice or document has
        (`file_id`, `file_unique_id`, `file_size`)."""
        with self._changed:
            file_id = f"file{len(self.files) + 1}{suffix}"
            self.files[file_id] = data
        return {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": len(data)}

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
            self.calls.append(Call(method, params, time.monotonic()))
            self._changed.notify_all()
            failures = self._failures.get(method)
            failure = failures.pop(0) if failures else None
            if failure is not None:
                error = _error(failure.status, failure.description, failure.retry_after)
                return failure.status, error
        if method == "getUpdates":
            if self.webhook is not None:
                return 409, _error(409, WEBHOOK_CONFLICT)
            return 200, {"ok": True, "result": self._updates(params)}
        if method == "getMe":
            return 200, {"ok": True, "result": self._me()}
        if method in {"setWebhook", "deleteWebhook", "getWebhookInfo"}:
            return 200, {"ok": True, "result": self._webhook_method(method, params)}
        if method in {"setMyCommands", "sendChatAction"}:
            return 200, {"ok": True, "result": True}
        if method == "sendMessage":
            return self._send_message(params)
        if method == "sendMessageDraft":
            return self._send_draft(params)
        if method == "editMessageText":
            return self._edit_message(params)
        if method == "deleteMessage":
            return self._delete_message(params)
        if method == "getFile":
            return self._get_file(params)
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

    # --- the webhook -------------------------------------------------------------------

    def _webhook_method(self, method: str, params: dict[str, Any]) -> Any:
        with self._changed:
            if _flag(params.get("drop_pending_updates")):
                self.updates.clear()
            if method == "setWebhook" and params.get("url"):
                allowed = tuple(params.get("allowed_updates") or ())
                self.webhook = Webhook(params["url"], params.get("secret_token", ""), allowed)
            elif method in {"setWebhook", "deleteWebhook"}:  # setWebhook with no url deletes
                self.webhook = None
            self._changed.notify_all()
            if method != "getWebhookInfo":
                return True
            info: dict[str, Any] = {
                "url": self.webhook.url if self.webhook else "",
                "has_custom_certificate": False,
                "pending_update_count": len(self.updates),
            }
            if self.webhook is not None and self.webhook.allowed_updates:
                info["allowed_updates"] = list(self.webhook.allowed_updates)
            return info

    def _deliver_forever(self) -> None:
        """POST pending updates to the webhook while one is set, until the server closes."""
        with ThreadPoolExecutor(WEBHOOK_CONNECTIONS, thread_name_prefix="webhook") as posts:
            while True:
                with self._changed:
                    if self._closing:
                        return
                    due = self._due_updates()
                    if not due:
                        self._changed.wait(self.webhook_retry_s / 2)
                        continue
                    hook = self.webhook
                assert hook is not None
                for update in due:
                    posts.submit(self._post_update, hook, update)

    def _due_updates(self) -> list[dict[str, Any]]:
        """The oldest update of each chat that has none in flight or waiting for a retry,
        marked in flight (called holding the lock)."""
        if self.webhook is None:
            return []
        now = time.monotonic()
        busy: set[object] = set()
        due: list[dict[str, Any]] = []
        for update in self.updates:
            queue = _queue_of(update)
            if queue in busy:
                continue
            busy.add(queue)
            update_id = update["update_id"]
            if update_id in self._in_flight or self._retry_at.get(update_id, 0) > now:
                continue
            if len(self._in_flight) >= WEBHOOK_CONNECTIONS:
                break
            self._in_flight.add(update_id)
            due.append(update)
        return due

    def _post_update(self, hook: Webhook, update: dict[str, Any]) -> None:
        request = urllib.request.Request(
            hook.url,
            data=json.dumps(update).encode("utf-8"),
            headers={"Content-Type": "application/json", SECRET_HEADER: hook.secret_token},
            method="POST",
        )
        try:
            with NO_PROXY.open(request, timeout=WEBHOOK_TIMEOUT_S) as answer:
                status = answer.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except OSError:
            status = 0  # refused, reset or timed out: no answer
        update_id = update["update_id"]
        with self._changed:
            self.webhook_posts.append(WebhookPost(update_id, status))
            self._in_flight.discard(update_id)
            if 200 <= status < 300:
                self.updates = [u for u in self.updates if u["update_id"] != update_id]
                self._retry_at.pop(update_id, None)
            else:
                self._retry_at[update_id] = time.monotonic() + self.webhook_retry_s
            self._changed.notify_all()

    # --- messages --------------------------------------------------------------------

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

    def _send_draft(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A draft: private chats only, a non-zero draft id, 1-4,096 characters."""
        text = str(params.get("text", ""))
        if int(params["chat_id"]) < 0:
            return 400, _error(400, "Bad Request: drafts can be sent only to private chats")
        if not int(params.get("draft_id") or 0):
            return 400, _error(400, "Bad Request: draft_id must be non-zero")
        if not text.strip() or len(text.encode("utf-16-le")) // 2 > 4096:
            return 400, _error(400, "Bad Request: text must be 1-4096 characters")
        return 200, {"ok": True, "result": True}

    def _edit_message(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Edit a delivered message's text (what `delivered` holds changes with it)."""
        text = str(params.get("text", ""))
        if not text.strip() or len(text.encode("utf-16-le")) // 2 > 4096:
            return 400, _error(400, "Bad Request: message text is empty or too long")
        with self._changed:
            found = [m for m in self.delivered if m["message_id"] == int(params["message_id"])]
            if not found or found[0]["chat"]["id"] != int(params["chat_id"]):
                return 400, _error(400, "Bad Request: message to edit not found")
            if found[0]["text"] == text:
                return 400, _error(400, "Bad Request: message is not modified")
            found[0]["text"] = text
            self._changed.notify_all()
            return 200, {"ok": True, "result": dict(found[0])}

    def _delete_message(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._changed:
            before = len(self.delivered)
            self.delivered = [
                m for m in self.delivered if m["message_id"] != int(params["message_id"])
            ]
            if len(self.delivered) == before:
                return 400, _error(400, "Bad Request: message to delete not found")
        return 200, {"ok": True, "result": True}

    def _get_file(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        file_id = str(params.get("file_id", ""))
        with self._changed:
            data = self.files.get(file_id)
        if data is None:
            return 400, _error(400, "Bad Request: invalid file_id")
        result = {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": len(data),
                  "file_path": f"files/{file_id}"}  # fmt: skip
        return 200, {"ok": True, "result": result}

    def file_bytes(self, path: str) -> bytes | None:
        """The bytes a GET of `/file/bot<token>/files/<file_id>` downloads, if any."""
        with self._changed:
            self.calls.append(Call("download", {"path": path}, time.monotonic()))
            return self.files.get(path.rsplit("/", 1)[-1]) if "/files/" in path else None

    def _handler_class(self) -> type[JsonHandler]:
        server = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                body = self.read_body().decode("utf-8")
                method = self.path.rstrip("/").rsplit("/", 1)[-1]
                status, answer = server.answer(method, _form(body, self.headers))
                self.send_json(status, json.dumps(answer))

            def do_GET(self) -> None:
                if not self.path.startswith("/file/"):
                    self.do_POST()
                    return
                data = server.file_bytes(self.path)
                if data is None:
                    self.send_json(404, json.dumps(_error(404, "Not Found")))
                else:
                    self.send_body(200, data, "application/octet-stream")

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


def _queue_of(update: dict[str, Any]) -> object:
    """Telegram delivers the updates of one chat in order, one at a time."""
    message = update.get("message")
    if isinstance(message, dict) and isinstance(message.get("chat"), dict):
        return message["chat"].get("id")
    return ("update", update["update_id"])


def _flag(value: object) -> bool:
    return value is True or str(value).lower() == "true"


def _error(status: int, description: str, retry_after: int | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        error["parameters"] = {"retry_after": retry_after}
    return error
