"""ASGI middleware that must see the raw request: the body limit and media type, and Idempotency-Key.

``BodyLimit`` reads the whole body of a request that has one (at most ``api_max_body_bytes``, or a limit of
its own below a path prefix: ``inbound_max_body_bytes`` for inbound events; so buffering it is bounded)
before any route runs: an oversized body is 413 and a body that is not JSON is 415, before anything is
parsed or written. The body is handed on to the app unchanged, and kept in the scope for
``Idempotency``, which fingerprints it.

``Idempotency`` (POST with an ``Idempotency-Key`` header, keys scoped per tenant):
- a new key runs the request; a 2xx answer is stored and replayed to every later request with the same key
  and the same method, path, query and body (header ``Idempotent-Replayed: true``);
- the same key while the first request is still running: 409 with Retry-After;
- the same key with another request: 422 (field ``Idempotency-Key``);
- a refused or failed request (not 2xx) forgets the key, so a corrected retry runs afresh: a refused
  request changed nothing, and only what changed something must not happen twice.
A request without a valid API key passes through untouched (the route answers 401).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobengine.core import bounds
from jobengine.errors import JobEngineError
from jobengine.http.context import ApiContext
from jobengine.http.problems import VALIDATION, problem_response, status_of
from jobengine.ports.auth import ClaimState

log = logging.getLogger("jobengine.http")
BODY_KEY = "jobengine.body"
_WITH_BODY = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_JSON_TYPE = re.compile(r"^application/([a-z0-9.+\-]+\+)?json\s*(;.*)?$", re.IGNORECASE)
_KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")  # visible ASCII


class BodyLimit:
    def __init__(
        self, app: ASGIApp, max_bytes: int, raw: Mapping[str, int] | None = None, under: Mapping[str, int] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.raw = dict(raw or {})  # path -> limit: routes that take a body of any type (pack uploads)
        self.under = dict(under or {})  # path prefix -> a smaller limit (inbound events)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _WITH_BODY:
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        raw_limit = self.raw.get(path)
        max_bytes = raw_limit or next((n for p, n in self.under.items() if path.startswith(p)), self.max_bytes)
        headers = Headers(scope=scope)
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_bytes):
            status = 413 if length.isdigit() else 400
            detail = f"the body is larger than {max_bytes} bytes" if status == 413 else "bad Content-Length"
            await problem_response(status, detail, instance=path, field="body")(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_bytes:
                detail = f"the body is larger than {max_bytes} bytes"
                await problem_response(413, detail, instance=path, field="body")(scope, receive, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        # The API takes JSON only: a pack upload takes raw bytes; an inbound event is JSON whatever its sender
        # says its type is (checked once its signature is: an unsigned one is refused alike); the dashboard's
        # forms (outside /api/) post urlencoded bodies.
        inbound = path.startswith("/api/v1/hooks/")
        if (
            body
            and raw_limit is None
            and not inbound
            and path.startswith("/api/")
            and not _JSON_TYPE.match(headers.get("content-type", ""))
        ):
            detail = "the body must be JSON (Content-Type: application/json)"
            await problem_response(415, detail, instance=path, field="body")(scope, receive, send)
            return
        if body and raw_limit is None and not inbound and path.startswith("/api/"):
            refused = unstorable_text(body)
            if refused is not None:
                field, why = refused
                await problem_response(422, f"{field}: {why}", instance=path, field=field, errors=[refused],
                                       type_=VALIDATION)(scope, receive, send)  # fmt: skip
                return
        scope[BODY_KEY] = body
        await self.app(scope, _replay(body, receive), send)


# An escaped NUL or UTF-16 surrogate (\uD800-\uDFFF): a pair of surrogates is one character above U+FFFF, a
# lone one has no UTF-8 form. Bodies without either (nearly all) skip the parse below.
_SUSPECT_ESCAPE = re.compile(rb"\\u(?:[dD][89a-fA-F]|0000)")


def unstorable_text(body: bytes) -> tuple[str, str] | None:
    """(field, why) for the first string or key of a JSON ``body`` that no backend can store as text
    (``core.bounds.text_error``): a lone surrogate, which no JSON encoder can write back as UTF-8, or a NUL,
    which PostgreSQL refuses; None when there is none, or when the body is not JSON (the route answers
    that)."""
    if _SUSPECT_ESCAPE.search(body) is None:
        return None
    try:
        value = json.loads(body)
    except ValueError:
        return None
    stack: list[tuple[Any, tuple[str, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            error = bounds.text_error(item)
            if error is not None:
                return ".".join(path) or "body", error
        elif isinstance(item, dict):
            for key, child in item.items():
                error = bounds.text_error(key)
                if error is not None:
                    return ".".join((*path, bounds.printable(key))) or "body", f"a key {error}"
                stack.append((child, (*path, key)))
        elif isinstance(item, list):
            stack.extend((child, (*path, str(i))) for i, child in enumerate(item))
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # then wait for the disconnect, as the server would

    return replayed


class Idempotency:
    def __init__(self, app: ASGIApp, ctx: Callable[[], ApiContext]) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        key = headers.get("idempotency-key")
        if key is None:
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if not _KEY_RE.match(key):
            detail = "Idempotency-Key must be 1-255 visible ASCII characters"
            await problem_response(422, detail, instance=path, field="Idempotency-Key")(scope, receive, send)
            return
        ctx = self.ctx()
        try:
            principal = await ctx.auth.from_headers(headers)
            if principal is None:
                await self.app(scope, receive, send)
                return
            body: bytes = scope.get(BODY_KEY, b"")
            fingerprint = hashlib.sha256(
                b"\n".join([scope["method"].encode(), path.encode(), scope.get("query_string", b""), body])
            ).hexdigest()
            claim = await ctx.engine.requests.claim(principal.tenant, key, fingerprint)
        except JobEngineError as exc:
            status, _ = status_of(exc)
            await problem_response(status, str(exc), instance=path)(scope, receive, send)
            return
        record = claim.record
        if record.fingerprint != fingerprint:
            detail = "this Idempotency-Key was used for another request (method, path or body differ)"
            await problem_response(422, detail, instance=path, field="Idempotency-Key")(scope, receive, send)
        elif claim.state is ClaimState.IN_FLIGHT:
            detail = "a request with this Idempotency-Key is still in flight; retry later"
            await problem_response(409, detail, instance=path, field="Idempotency-Key", headers={"Retry-After": "1"})(
                scope, receive, send
            )
        elif claim.state is ClaimState.DONE:
            assert record.status is not None
            ctx.metrics.idempotent_replays.inc()
            await _send(send, record.status, record.content_type or "application/json", record.body or b"", True)
        else:
            await self._run(scope, receive, send, ctx, principal.tenant, key)

    async def _run(self, scope: Scope, receive: Receive, send: Send, ctx: ApiContext, tenant: str, key: str) -> None:
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        try:
            await self.app(scope, receive, capture)
        except BaseException:
            await ctx.engine.requests.release(tenant, key)
            raise
        status = int(start.get("status", 500))
        body = b"".join(chunks)
        headers = Headers(raw=start.get("headers", []))
        if 200 <= status < 300:
            await ctx.engine.requests.finish(tenant, key, status, headers.get("content-type", "application/json"), body)
        else:
            await ctx.engine.requests.release(tenant, key)
        await send({"type": "http.response.start", "status": status, "headers": start.get("headers", [])})
        await send({"type": "http.response.body", "body": body, "more_body": False})


async def _send(send: Send, status: int, content_type: str, body: bytes, replayed: bool) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    if replayed:
        headers.append((b"idempotent-replayed", b"true"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class Unexpected:
    """Answer an exception no handler took (a bug) with a 500 problem, and return normally.

    The app's own handler for ``Exception`` runs in Starlette's outermost middleware, which answers and then
    raises the exception again to the server; uvicorn closes a connection whose app raised after answering,
    so a client's keep-alive connection would break on every 500. Here, inside the other middleware, the
    exception ends with the answer. One already answering (a stream that fails midway) still raises: its
    connection cannot carry a complete answer any more."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            if started:
                raise
            path = scope.get("path", "")
            log.exception("%s %s failed", scope.get("method", ""), path)
            await problem_response(500, "the server failed to handle this request", instance=path)(scope, receive, send)


#: Query parameters that the API declares as arrays (repeatable); every other one takes a single value.
REPEATABLE_QUERY = frozenset({"state", "status", "type"})


class SingleValuedQuery:
    """Refuse a repeated query parameter that is not an array (``?task=a&task=b``) with a 422 naming it.

    Without this FastAPI would silently keep the last value, so a client's mistake would run a different
    query than it meant (schemathesis's negative tests found it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("query_string"):
            from urllib.parse import parse_qsl

            seen: set[str] = set()
            for name, _ in parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True):
                if name in seen and name not in REPEATABLE_QUERY:
                    body = (
                        b'{"type":"about:blank","title":"Unprocessable Content","status":422,'
                        b'"detail":"query parameter given more than once","errors":[{"field":"'
                        + re.sub(r"[^A-Za-z0-9_.\-]", "", name).encode()
                        + b'","message":"give it at most once"}]}'
                    )
                    await _send(send, 422, "application/problem+json", body, replayed=False)
                    return
                seen.add(name)
        await self.app(scope, receive, send)
