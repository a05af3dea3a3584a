"""Who may use the dashboard, and which writes are the operator's own.

One token (`[web] token`, `MNEMO_WEB_TOKEN`, or a random one printed at start; at least
24 characters) opens every page: as `Authorization: Bearer …`, or typed once into the login
form, which sets an HttpOnly, SameSite=Strict session cookie. Before any of that, the Host
header must be one of the dashboard's names, and a client that keeps sending wrong tokens
must wait longer and longer (429), as `bots.web.door` decides. A POST must come from the
dashboard's own origin (the browser's Origin, else Referer, header) and, for a cookie
session, carry the session's CSRF token in its form. Every answer says `Cache-Control:
no-store`, so no page showing a memory outlives its forgetting in a cache.
"""

from __future__ import annotations

import hmac
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp

from bots.web.door import LoginThrottle, host_name
from core.config import MIN_WEB_TOKEN
from core.errors import ConfigError

COOKIE = "mnemo_session"
MAX_SESSIONS = 64
OPEN_PATHS = ("/login", "/static/", "/favicon.ico")
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Pragma": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self';"
        " script-src 'self'; connect-src 'self';"
        " frame-ancestors 'none'; base-uri 'none'"
    ),
}


@dataclass(frozen=True)
class Session:
    id: str
    csrf: str


class Gate:
    """The token and the open sessions (in memory: a restart logs everyone out)."""

    def __init__(self, token: str, throttle: LoginThrottle | None = None) -> None:
        if len(token) < MIN_WEB_TOKEN:
            raise ConfigError(
                f"the dashboard's token (MNEMO_WEB_TOKEN or [web] token) must be at least"
                f" {MIN_WEB_TOKEN} characters"
            )
        self.token = token
        self.throttle = throttle or LoginThrottle()
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def token_matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode("utf-8"), self.token.encode("utf-8"))

    def open_session(self) -> Session:
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32))
        self._sessions[session.id] = session
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return session

    def close_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def session_of(self, request: Request) -> Session | None:
        return self._sessions.get(request.cookies.get(COOKIE, ""))

    def bearer(self, request: Request) -> bool:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and bool(value) and self.token_matches(value.strip())


def client_of(request: Request) -> str:
    """Whom failed logins are counted against: the peer's address."""
    return request.client.host if request.client is not None else ""


def too_many(wait_s: int) -> Response:
    return PlainTextResponse(
        f"too many wrong tokens from your address; try again in {wait_s} s",
        status_code=429,
        headers={"Retry-After": str(wait_s)},
    )


def own_origin(request: Request) -> str:
    return f"{request.url.scheme}://{request.headers.get('host', '')}"


def same_origin(request: Request) -> bool:
    """Whether a write comes from a page of this dashboard (Origin, else Referer)."""
    origin = request.headers.get("origin")
    if origin is not None:
        return origin == own_origin(request)
    referer = request.headers.get("referer", "")
    return referer == own_origin(request) or referer.startswith(own_origin(request) + "/")


class GateMiddleware(BaseHTTPMiddleware):
    """Token or session on every page but the login form; same-origin writes; no caching."""

    def __init__(self, app: ASGIApp, gate: Gate, hosts: frozenset[str]) -> None:
        super().__init__(app)
        self.gate = gate
        self.hosts = hosts

    async def dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await self._checked(request, call_next)
        response.headers.update(SECURITY_HEADERS)
        return response

    def _front_door(self, request: Request) -> Response | None:
        """A refusal for a foreign Host (DNS rebinding) or a client that must wait."""
        name = host_name(request.headers.get("host", ""))
        if name not in self.hosts:
            return PlainTextResponse(
                f"this dashboard does not answer to the host name {name!r}; if it is yours,"
                " add it to [web] allowed_hosts",
                status_code=421,
            )
        logging_in = request.method == "POST" and request.url.path == "/login"
        if logging_in or "authorization" in request.headers:
            wait = self.gate.throttle.retry_after(client_of(request))
            if wait:
                return too_many(wait)
        return None

    async def _checked(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if (refused := self._front_door(request)) is not None:
            return refused
        bearer = self.gate.bearer(request)
        if "authorization" in request.headers and not bearer:
            self.gate.throttle.failed(client_of(request))
        writing = request.method not in ("GET", "HEAD", "OPTIONS")
        cross = not same_origin(request)
        # A bearer client (a script) sends no cookie, so it cannot be ridden cross-site;
        # it still may not send a foreign Origin.
        if writing and cross and not (bearer and "origin" not in request.headers):
            return PlainTextResponse("cross-site request refused", status_code=403)
        request.state.session = None
        if request.url.path.startswith(OPEN_PATHS):
            return await call_next(request)
        session = self.gate.session_of(request)
        if not bearer and session is None:
            if request.method == "GET":
                return RedirectResponse(f"/login?next={request.url.path}", status_code=303)
            return PlainTextResponse("log in first", status_code=401)
        request.state.session = session
        request.state.bearer = bearer
        return await call_next(request)


async def checked_form(request: Request) -> FormData:
    """The POSTed form, once its CSRF token matches the session's (a bearer client has no
    session and needs none)."""
    form = await request.form()
    session: Session | None = request.state.session
    if session is not None:
        given = str(form.get("csrf", ""))
        if not hmac.compare_digest(given.encode("utf-8"), session.csrf.encode("utf-8")):
            raise HTTPException(403, "the form's CSRF token is missing or stale; reload the page")
    elif not getattr(request.state, "bearer", False):
        raise HTTPException(401, "log in first")
    return form
