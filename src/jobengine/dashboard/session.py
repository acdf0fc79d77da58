"""Who is looking: the dashboard's login session and its CSRF token.

The login form takes an API key (the same keys, scopes and tenants as the HTTP API) and opens a session on
the server (``Engine.keys.open_session``): the cookie holds a random token (``js_...``, never the key), the
store its sha256, the key it was opened with and its expiry (``dashboard_session_seconds``). The cookie is
``Secure``, ``HttpOnly`` and ``SameSite=Strict``: scripts cannot read it, other sites cannot make the
browser send it. Every request reads the session and its key again, so a logout, a revoked key or an
expiry ends it at once in every process; the token is no API key, so the API refuses it as a bearer.

CSRF: every form carries a token derived from the session's token (an HMAC with its sha256 as the secret),
so it is bound to the session and cannot be guessed without the cookie. A POST without the right token, or
whose ``Origin`` names another site, is refused (403) before anything is written. SameSite=Strict alone
would already keep the cookie off cross-site requests; the token is the second lock.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request

from jobengine.http.auth import Principal
from jobengine.http.context import context

COOKIE = "jobengine_session"
CSRF_FIELD = "csrf"
#: The longest form body the dashboard reads (its forms are a few fields).
MAX_FORM_BYTES = 64 * 1024


class LoginRequired(Exception):
    """No valid session: the page answers with the login page (a redirect to it)."""


class DashboardError(Exception):
    """A refused request: shown as an error page with ``status`` and the field at fault."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


@dataclass(frozen=True, slots=True)
class Session:
    principal: Principal
    csrf: str
    token: str = field(default="", repr=False)  # the cookie's; lets a live stream check it is still valid

    @property
    def tenant(self) -> str:
        return self.principal.tenant

    def allows(self, scope: str) -> bool:
        return self.principal.allows(scope)


def csrf_token(session_token: str) -> str:
    secret = hashlib.sha256(session_token.encode()).digest()
    return hmac.new(secret, b"jobengine-dashboard-csrf", hashlib.sha256).hexdigest()


async def current(request: Request) -> Session | None:
    """The session of the request's cookie, or None (no cookie; an unknown, ended or expired session; its
    key revoked)."""
    token = request.cookies.get(COOKIE)
    if not token:
        return None
    found = await context(request).engine.keys.session(token)
    if found is None:
        return None
    _, key = found
    return Session(Principal(key.id, key.tenant, key.scopes), csrf_token(token), token)


async def still_valid(request: Request, session: Session) -> bool:
    """Whether ``session`` has not ended meanwhile (a live stream asks, every ``sse_keepalive``)."""
    return await context(request).engine.keys.session(session.token) is not None


async def require(request: Request, scope: str | None) -> Session:
    """The request's session, which must hold ``scope`` (if given): LoginRequired without one, 403 without
    the scope."""
    session = await current(request)
    if session is None:
        raise LoginRequired()
    if scope is not None and not session.allows(scope):
        raise DashboardError(403, f"your API key lacks the scope {scope!r}", "scope")
    return session


def same_origin(request: Request) -> bool:
    """False when the request says it comes from another site (``Origin``, else ``Referer``)."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source or source == "null":
        return source is None
    host = request.headers.get("host", "")
    return urlsplit(source).netloc == host


async def read_form(request: Request) -> dict[str, str]:
    """The urlencoded form of a POST (first value of each field). 413 when it is too large."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise DashboardError(413, f"the form is larger than {MAX_FORM_BYTES} bytes", "body")
    try:
        parsed = parse_qs(body.decode(), keep_blank_values=True, max_num_fields=200)
    except (UnicodeDecodeError, ValueError):
        raise DashboardError(400, "the form is not valid urlencoded UTF-8", "body") from None
    return {k: v[0] for k, v in parsed.items()}


async def action(request: Request, scope: str | None) -> tuple[Session, dict[str, str]]:
    """A form POST: a session with ``scope``, the same origin and the session's CSRF token. Returns the form."""
    session = await require(request, scope)
    if not same_origin(request):
        raise DashboardError(403, "the form was posted from another site", "Origin")
    form = await read_form(request)
    if not hmac.compare_digest(form.get(CSRF_FIELD, ""), session.csrf):
        raise DashboardError(403, "the form's CSRF token is missing or wrong; reload the page", CSRF_FIELD)
    return session, form


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a path of this site only (never ``//host`` or a URL)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
