"""Who is asking: the session cookie (or the operator's trusted header), the CSRF token of
every form, the origin of every POST, and the headers every answer carries."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bridge.config import WebSection
from bridge.core.events import Author
from bridge.core.signin import Session, WebSessions
from bridge.web.access import Access, Viewer

COOKIE = "agy_console"
# Told of each session the trusted header opens (the audit trail), as a link's sign-in is.
SignedIn = Callable[[Author, str], Awaitable[None]]
# No inline script or style anywhere: scripts and styles come from /static only.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    # A sign-in link in the address bar must not travel on in a Referer to another site.
    # Not no-referrer: under it a browser sends `Origin: null` with the console's own form
    # POSTs, which same_origin must refuse (tests/web/browser/: every form failed in Chromium).
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
_HEADER_SESSIONS = 10_000
# Form bodies are a few fields: anything larger is refused unread.
MAX_FORM_BYTES = 16 * 1024


class SecurityHeaders:
    """Every answer with the console's security headers (pages not cached)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += _HEADERS
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


@dataclass(frozen=True)
class Visit:
    """A signed-in request: the person, their session, a new cookie to set (trusted header)."""

    viewer: Viewer
    session: Session
    new_session: str | None = None


class Guard:
    def __init__(
        self,
        web: WebSection,
        sessions: WebSessions,
        access: Access,
        signed_in: SignedIn | None = None,
    ) -> None:
        self.web = web
        self.sessions = sessions
        self.access = access
        self.signed_in = signed_in
        self.secure = web.public_url.startswith("https://")
        # Trusted-header people -> their session id (bounded; a miss opens a new one).
        self._by_header: dict[str, str] = {}

    async def visit(self, request: Request) -> Visit | None:
        """The signed-in person, or None (sign in through `!web`)."""
        trusted = self._trusted(request)
        session = await self.sessions.session(request.cookies.get(COOKIE, ""))
        if trusted is not None and (
            session is None
            or (session.author.id, session.platform) != (trusted.id, self.web.trusted_platform)
        ):
            # The proxy's person: their session (a client that keeps no cookie reuses it).
            known = self._by_header.get(trusted.id)
            session = await self.sessions.session(known) if known is not None else None
            if session is None:
                known = await self.sessions.open(trusted, self.web.trusted_platform)
                session = await self.sessions.session(known)
                if session is not None and self.signed_in is not None:
                    await self.signed_in(trusted, self.web.trusted_platform)
                if len(self._by_header) >= _HEADER_SESSIONS:
                    self._by_header.clear()
                self._by_header[trusted.id] = known
            return self._visit(session, known)
        return self._visit(session, None)

    def _visit(self, session: Session | None, new: str | None) -> Visit | None:
        if session is None:
            return None
        viewer = self.access.viewer(session.author, session.platform)
        return Visit(viewer, session, new) if viewer is not None else None

    def _trusted(self, request: Request) -> Author | None:
        if not self.web.trusted_header or not self.web.trusted_platform:
            return None
        value = request.headers.get(self.web.trusted_header, "").strip()
        return Author(id=value) if value and len(value) <= 255 else None

    def set_cookie(self, response: Response, session_id: str) -> None:
        response.set_cookie(
            COOKIE,
            session_id,
            max_age=int(self.web.session_hours * 3600),
            path="/",
            httponly=True,
            secure=self.secure,
            samesite="strict",
        )

    def same_origin(self, request: Request) -> bool:
        """A POST from our own pages: its Origin (when the browser sends one) is ours."""
        origin = request.headers.get("origin")
        if origin is None:  # no browser leaves it out of a cross-site POST; the token still counts
            return True
        ours = {f"{request.url.scheme}://{request.headers.get('host', '')}"}
        if self.web.public_url:
            parts = urlsplit(self.web.public_url)
            ours.add(f"{parts.scheme}://{parts.netloc}")
        return origin in ours

    async def form(self, request: Request, visit: Visit | None) -> FormData | None:
        """The POST's fields when it comes from our pages with the session's CSRF token."""
        if not self.same_origin(request):
            return None
        length = request.headers.get("content-length")
        if length is None:
            if "transfer-encoding" in request.headers:
                return None  # a body of unknown size: forms from our pages say theirs
        elif not length.isdigit() or int(length) > MAX_FORM_BYTES:
            return None
        form = await request.form(max_files=0, max_fields=20)
        if visit is not None:
            token = form.get("csrf")
            if not isinstance(token, str) or not hmac.compare_digest(token, visit.session.csrf):
                return None
        return form
