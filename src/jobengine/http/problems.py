"""Errors as ``application/problem+json`` (RFC 9457), with the field at fault.

Every error response of the API has this shape; the handlers here turn jobengine errors, request
validation errors and HTTP errors into it, so no route formats an error itself. Mapping:

    400 malformed JSON / unreadable body       404 NotFound (also: another tenant's id)
    401 missing, unknown or revoked key        409 IllegalState, IdempotencyConflict, AlreadyExists, a lost lease,
    403 the key lacks the scope                    an Idempotency-Key still in flight, AmbiguousId (an id
                                                   prefix of several jobs: ``candidates`` lists some)
    413 body over ``api_max_body_bytes``       415 a body that is not JSON
    422 invalid fields: ``type`` ``urn:jobengine:problem:validation`` when the request does not match the
        schema, ``urn:jobengine:problem:invalid-value`` when the engine refuses a value the schema allows
        (InvalidJob, InvalidSchedule, UnknownDependency); an Idempotency-Key reused with another body
    429 QueueFull: the queue is past its hard depth limit (Retry-After; ``urn:jobengine:problem:queue-full``)
    503 the store or a transport is unavailable (Retry-After); Overloaded: low-priority work shed while the
        service is saturated (Retry-After; ``urn:jobengine:problem:overloaded``, field ``priority``)
    500 anything else: a bug; the detail says nothing about internals, the log has the traceback
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from jobengine.core import codec
from jobengine.errors import (
    AlreadyExists,
    AmbiguousId,
    ConfigError,
    FlowRefused,
    IdempotencyConflict,
    IllegalState,
    InvalidJob,
    JobEngineError,
    NotFound,
    Overloaded,
    QueueFull,
    StoreUnavailable,
    TransportError,
    UnknownDependency,
    UnknownTask,
)

log = logging.getLogger("jobengine.http")

PROBLEM_JSON = "application/problem+json"
#: Problem types of a 422: the request does not match the schema / a value the schema allows is refused.
VALIDATION = "urn:jobengine:problem:validation"
INVALID_VALUE = "urn:jobengine:problem:invalid-value"
FLOW_TYPES = {"QueueFull": "urn:jobengine:problem:queue-full", "Overloaded": "urn:jobengine:problem:overloaded"}


class FieldError(BaseModel):
    field: str
    message: str


class Problem(BaseModel):
    """An error (RFC 9457). ``field`` names the request field at fault, when there is one."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    field: str | None = None
    errors: list[FieldError] = Field(default_factory=list)


class ProblemError(Exception):
    """Raise from a route or dependency to answer with a problem."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        field: str | None = None,
        type_: str | None = None,
        headers: Mapping[str, str] | None = None,
        errors: Sequence[tuple[str, str]] = (),
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.field = field
        self.type = type_
        self.headers = dict(headers or {})
        self.errors = list(errors)
        self.extra = dict(extra or {})


def problem_response(
    status: int,
    detail: str | None,
    *,
    instance: str | None = None,
    field: str | None = None,
    type_: str | None = None,
    headers: Mapping[str, str] | None = None,
    errors: Sequence[tuple[str, str]] = (),
    extra: Mapping[str, Any] | None = None,
) -> Response:
    body: dict[str, Any] = {
        "type": type_ or "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "instance": instance,
        "field": field,
        "errors": [{"field": f, "message": m} for f, m in errors],
    }
    body.update(extra or {})
    return Response(codec.dumps(body).encode(), status, headers=dict(headers or {}), media_type=PROBLEM_JSON)


def status_of(exc: JobEngineError) -> tuple[int, str | None]:
    if isinstance(exc, QueueFull):
        return 429, "queue"
    if isinstance(exc, Overloaded):
        return 503, "priority"
    if isinstance(exc, NotFound):
        return 404, None
    if isinstance(exc, AmbiguousId):
        return 409, f"{exc.what}_id"
    if isinstance(exc, InvalidJob):
        return 422, exc.field
    if isinstance(exc, UnknownDependency):
        return 422, "depends_on"
    if isinstance(exc, UnknownTask):
        return 422, "task"
    if isinstance(exc, IdempotencyConflict):
        return 409, "idempotency_key"
    if isinstance(exc, AlreadyExists):
        return 409, "name"
    if isinstance(exc, TransportError):
        return 503, None
    if isinstance(exc, IllegalState):
        return 409, None
    if isinstance(exc, ConfigError):
        return 501, None  # the server's store cannot do this: not the client's fault, not a crash
    if isinstance(exc, StoreUnavailable):
        return 503, None
    return 500, None


def _loc_field(loc: Sequence[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or str(loc[-1] if loc else "body")


def install(app: FastAPI) -> None:
    """Register the handlers that make every error a problem."""

    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ProblemError)
        return problem_response(
            exc.status, exc.detail, instance=request.url.path, field=exc.field, type_=exc.type,
            headers=exc.headers, errors=exc.errors, extra=exc.extra,
        )  # fmt: skip

    async def on_engine_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, JobEngineError)
        status, field = status_of(exc)
        headers = {"Retry-After": "1"} if status == 503 else {}
        if isinstance(exc, FlowRefused):  # flow control (jobengine.core.flow): nothing was written, come back later
            headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
        if status >= 500 and status != 503:
            log.error("%s %s failed: %s", request.method, request.url.path, exc, exc_info=exc)
            detail = "the server failed to handle this request" if status == 500 else str(exc)
        else:
            detail = getattr(exc, "message", None) or str(exc)
        errors = [(field, detail)] if field else []
        extra = {"candidates": exc.candidates} if isinstance(exc, AmbiguousId) else None
        # A field the schema accepted but the engine refused (a CRON expression, a dependency that does not
        # exist): a type of its own, so clients can tell it from a malformed request.
        type_ = INVALID_VALUE if status == 422 else FLOW_TYPES.get(type(exc).__name__)
        return problem_response(status, detail, instance=request.url.path, field=field, headers=headers,
                                errors=errors, type_=type_, extra=extra)  # fmt: skip

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            return problem_response(400, "the body is not valid JSON", instance=request.url.path, field="body")
        pairs = [(_loc_field(e.get("loc", ())), str(e.get("msg", "invalid"))) for e in errors]
        first = pairs[0] if pairs else ("body", "invalid request")
        detail = f"{first[0]}: {first[1]}" + (f" (and {len(pairs) - 1} more)" if len(pairs) > 1 else "")
        return problem_response(422, detail, instance=request.url.path, field=first[0], errors=pairs, type_=VALIDATION)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers or {})
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).description
        field = "body" if exc.status_code == 400 else None
        return problem_response(exc.status_code, detail, instance=request.url.path, field=field, headers=headers)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return problem_response(500, "the server failed to handle this request", instance=request.url.path)

    app.add_exception_handler(ProblemError, on_problem)
    app.add_exception_handler(JobEngineError, on_engine_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` entry documenting problem answers (the schema is fixed in ``openapi.py``)."""
    return {s: {"description": HTTPStatus(s).phrase, "model": Problem} for s in statuses}
