"""The dashboard's writes (POST): log in and out, edit or forget a memory, save AGENTS.md,
cancel a scheduled task, check the model. Each takes a form with the session's CSRF token
(`checked_form`) and ends in a redirect to the page that shows the result."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from bots.web.auth import COOKIE, Gate, checked_form, client_of
from bots.web.dashboard import Dashboard
from bots.web.pages import Pages
from core.api import Chat
from core.errors import InputError
from core.text import whole_number
from memory.keeper import FactRefused


def local_path(target: str) -> str:
    """Where to go after logging in: a path of this site only (never `//host` or a URL)."""
    if target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


class Actions:
    def __init__(self, dashboard: Dashboard, gate: Gate, pages: Pages) -> None:
        self.dashboard = dashboard
        self.gate = gate
        self.pages = pages

    async def login_form(self, request: Request, error: str = "", status: int = 200) -> Response:
        target = local_path(request.query_params.get("next", "/"))
        return self.pages.render(request, "login.html", status, error=error, next=target)

    async def login(self, request: Request) -> Response:
        form = await request.form()
        client = client_of(request)
        if not self.gate.token_matches(str(form.get("token", ""))):
            wait = self.gate.throttle.failed(client)
            later = f" Wait {wait} s before the next try." if wait else ""
            return await self.login_form(
                request, f"That is not the token of this dashboard.{later}", 403
            )
        self.gate.throttle.succeeded(client)
        session = self.gate.open_session()
        response = RedirectResponse(local_path(str(form.get("next", "/"))), status_code=303)
        response.set_cookie(COOKIE, session.id, httponly=True, samesite="strict", path="/")
        return response

    async def logout(self, request: Request) -> Response:
        await checked_form(request)
        if request.state.session is not None:
            self.gate.close_session(request.state.session.id)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    async def edit_memory(self, request: Request, chat: Chat, memory_id: int) -> Response:
        form = await checked_form(request)
        try:
            self.dashboard.edit_memory(chat, memory_id, str(form.get("content", "")))
        except FactRefused as exc:
            return await self.pages.memory(request, chat, memory_id, 422, f"Not saved: {exc.why}.")
        return RedirectResponse(
            f"/chats/{chat.id}/memories/{memory_id}?done=saved", status_code=303
        )

    async def forget_memory(self, request: Request, chat: Chat, memory_id: int) -> Response:
        await checked_form(request)
        memory = self.dashboard.forget_memory(chat, memory_id)
        return RedirectResponse(f"/chats/{chat.id}/memories?forgotten={memory.id}", status_code=303)

    async def save_notes(self, request: Request, chat: Chat) -> Response:
        form = await checked_form(request)
        text = str(form.get("content", "")).replace("\r\n", "\n")
        try:
            self.dashboard.save_notes(chat, text)
        except InputError as exc:
            return await self.pages.notes(request, chat, 422, f"Not saved: {exc}.")
        return RedirectResponse(f"/chats/{chat.id}/notes?done=saved", status_code=303)

    async def cancel_task(self, request: Request) -> Response:
        await checked_form(request)
        task_id = whole_number(str(request.path_params["task_id"]))
        if task_id is None:
            raise HTTPException(404, "not found")
        try:
            self.dashboard.cancel_task(task_id)
        except InputError as exc:
            raise HTTPException(404, str(exc)) from None
        return RedirectResponse(f"/tasks?cancelled={task_id}", status_code=303)

    async def check_model(self, request: Request) -> Response:
        await checked_form(request)
        await self.dashboard.check_model()
        return RedirectResponse("/health#model", status_code=303)
