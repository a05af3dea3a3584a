"""The dashboard as an ASGI app: routes, the gate, templates and static files.

Handlers are `async` and run on the event loop that serves the bot, so they share its
database connection the way a turn does (one thread, never inside another's transaction).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from bots.web.actions import Actions
from bots.web.auth import Gate, GateMiddleware
from bots.web.chat import WebChatChannel
from bots.web.chat_page import ChatPage
from bots.web.dashboard import Dashboard
from bots.web.door import LoginThrottle, allowed_hosts
from bots.web.live import LivePage
from bots.web.pages import Pages
from core.api import Chat
from core.errors import InputError
from core.text import whole_number
from memory.store import MAX_MEMORY_ID

HERE = Path(__file__).parent
LOOPBACK = allowed_hosts("127.0.0.1")
ChatHandler = Callable[[Request, Chat], Awaitable[Response]]
MemoryHandler = Callable[[Request, Chat, int], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]


def _path_id(request: Request, name: str) -> int:
    value = whole_number(str(request.path_params[name]))
    if value is None or not 0 < value <= MAX_MEMORY_ID:
        raise HTTPException(404, "not found")
    return value


def build_app(
    dashboard: Dashboard,
    token: str,
    hosts: frozenset[str] = LOOPBACK,
    throttle: LoginThrottle | None = None,
    chat: WebChatChannel | None = None,
) -> Starlette:
    """The dashboard over `dashboard`, opened by `token`, answering to the Host names
    `hosts` (default: loopback's), failed logins slowed by `throttle`; with `chat`, the
    chat page talks to the bot through it."""
    gate = Gate(token, throttle)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    pages = Pages(dashboard, templates, chat_page=chat is not None)
    talk = ChatPage(dashboard, pages, chat).routes() if chat is not None else []

    async def error_page(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if not hasattr(request.state, "session"):
            request.state.session = None
        return pages.render(request, "error.html", exc.status_code, error=exc.detail)

    return Starlette(
        routes=[*talk, *routes(dashboard, pages, Actions(dashboard, gate, pages))],
        middleware=[Middleware(GateMiddleware, gate=gate, hosts=hosts)],
        exception_handlers={HTTPException: error_page},
    )


def routes(dashboard: Dashboard, pages: Pages, actions: Actions) -> list[BaseRoute]:
    """Every page (GET) and action (POST); a chat's and a memory's by their ids."""

    def in_chat(handler: ChatHandler) -> Endpoint:
        return _chat_endpoint(dashboard, handler)

    def on_memory(handler: MemoryHandler) -> Endpoint:
        return _chat_endpoint(dashboard, _with_memory_id(handler))

    chat = "/chats/{chat_id}"
    live = LivePage(dashboard, pages)
    memory = f"{chat}/memories/{{memory_id}}"
    return [
        Route("/login", actions.login_form, methods=["GET"]),
        Route("/login", actions.login, methods=["POST"]),
        Route("/logout", actions.logout, methods=["POST"]),
        Route("/", pages.chats),
        Route("/pictures", pages.pictures),
        Route("/health", pages.health),
        Route("/health/model", actions.check_model, methods=["POST"]),
        Route("/tasks", pages.tasks),
        Route("/tasks/{task_id}/cancel", actions.cancel_task, methods=["POST"]),
        Route(chat, in_chat(pages.conversation)),
        Route(f"{chat}/memories", in_chat(pages.memories)),
        Route(memory, on_memory(pages.memory)),
        Route(f"{memory}/edit", on_memory(actions.edit_memory), methods=["POST"]),
        Route(f"{memory}/forget", on_memory(actions.forget_memory), methods=["POST"]),
        Route(f"{chat}/notes", in_chat(pages.notes), methods=["GET"]),
        Route(f"{chat}/notes", in_chat(actions.save_notes), methods=["POST"]),
        Route(f"{chat}/strategies", in_chat(pages.strategies)),
        Route(f"{chat}/reflector", in_chat(pages.reflector)),
        Route(f"{chat}/subagents", in_chat(pages.subagents)),
        Route(f"{chat}/context", in_chat(pages.context)),
        Route(f"{chat}/live", in_chat(live.page)),
        Route(f"{chat}/live/events", in_chat(live.events)),
        # Browsers ask for /favicon.ico whatever the page links: no 404 in their console.
        Route("/favicon.ico", _favicon),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]


async def _favicon(request: Request) -> Response:
    return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml")


def _chat_endpoint(dashboard: Dashboard, handler: ChatHandler) -> Endpoint:
    """`handler` given the chat of the path's `chat_id`; an unknown chat, or an id that is
    not this chat's (a memory of another chat), is a 404."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request, dashboard.chat(_path_id(request, "chat_id")))
        except InputError as exc:
            raise HTTPException(404, str(exc)) from None

    return endpoint


def _with_memory_id(handler: MemoryHandler) -> ChatHandler:
    async def in_chat(request: Request, chat: Chat) -> Response:
        return await handler(request, chat, _path_id(request, "memory_id"))

    return in_chat
