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
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from bots.web.actions import Actions
from bots.web.auth import Gate, GateMiddleware
from bots.web.dashboard import Dashboard
from bots.web.pages import Pages
from core.api import Chat
from core.errors import InputError
from core.text import whole_number
from memory.store import MAX_MEMORY_ID

HERE = Path(__file__).parent
ChatHandler = Callable[[Request, Chat], Awaitable[Response]]
MemoryHandler = Callable[[Request, Chat, int], Awaitable[Response]]


def _path_id(request: Request, name: str) -> int:
    value = whole_number(str(request.path_params[name]))
    if value is None or not 0 < value <= MAX_MEMORY_ID:
        raise HTTPException(404, "not found")
    return value


def build_app(dashboard: Dashboard, token: str) -> Starlette:
    """The dashboard over `dashboard`, opened by `token`."""
    gate = Gate(token)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    pages = Pages(dashboard, templates)
    actions = Actions(dashboard, gate, pages)

    def chat_route(handler: ChatHandler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                chat = dashboard.chat(_path_id(request, "chat_id"))
                return await handler(request, chat)
            except InputError as exc:
                raise HTTPException(404, str(exc)) from None

        return endpoint

    def memory_route(handler: MemoryHandler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                chat = dashboard.chat(_path_id(request, "chat_id"))
                return await handler(request, chat, _path_id(request, "memory_id"))
            except InputError as exc:
                raise HTTPException(404, str(exc)) from None

        return endpoint

    async def not_found(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if not hasattr(request.state, "session"):
            request.state.session = None
        return pages.render(request, "error.html", exc.status_code, error=exc.detail)

    chat = "/chats/{chat_id}"
    memory = f"{chat}/memories/{{memory_id}}"
    routes = [
        Route("/login", actions.login_form, methods=["GET"]),
        Route("/login", actions.login, methods=["POST"]),
        Route("/logout", actions.logout, methods=["POST"]),
        Route("/", pages.chats),
        Route("/pictures", pages.pictures),
        Route("/health", pages.health),
        Route("/health/model", actions.check_model, methods=["POST"]),
        Route(chat, chat_route(pages.conversation)),
        Route(f"{chat}/memories", chat_route(pages.memories)),
        Route(memory, memory_route(pages.memory)),
        Route(f"{memory}/edit", memory_route(actions.edit_memory), methods=["POST"]),
        Route(f"{memory}/forget", memory_route(actions.forget_memory), methods=["POST"]),
        Route(f"{chat}/notes", chat_route(pages.notes), methods=["GET"]),
        Route(f"{chat}/notes", chat_route(actions.save_notes), methods=["POST"]),
        Route(f"{chat}/strategies", chat_route(pages.strategies)),
        Route(f"{chat}/reflector", chat_route(pages.reflector)),
        Route(f"{chat}/context", chat_route(pages.context)),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(GateMiddleware, gate=gate)],
        exception_handlers={HTTPException: not_found},
    )
