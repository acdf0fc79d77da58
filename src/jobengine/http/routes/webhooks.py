"""``/api/v1/webhooks`` (endpoints, deliveries, attempts, resend, inbound hooks; scopes ``webhooks:read`` /
``webhooks:write``, tenant-scoped: another tenant's id is 404) and ``POST /api/v1/hooks/{tenant}/{name}``
(inbound events: no API key, a signature with the hook's secret instead; see :func:`receive`)."""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr
from starlette.responses import Response

from jobengine.core.webhooks.jsonshape import attempt_to_json, delivery_to_json, endpoint_to_json, inbound_to_json
from jobengine.core.webhooks.model import InboundLimited, InboundRefused, InboundReplay
from jobengine.http.auth import Principal, require
from jobengine.http.context import context
from jobengine.http.problems import ProblemError, problem_response, problem_responses
from jobengine.http.responses import READ, READ_ONE, WRITE, WRITE_ONE, json_response
from jobengine.http.schemas import INTEGRAL, Strict
from jobengine.serialize import run_to_json

router = APIRouter(prefix="/api/v1/webhooks", tags=["webhooks"])
hooks = APIRouter(prefix="/api/v1/hooks", tags=["webhooks"])

Reader = Annotated[Principal, Depends(require("webhooks:read"))]
Writer = Annotated[Principal, Depends(require("webhooks:write"))]
Id = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:\-]+$")]
HookName = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")]
#: Inbound paths take any name: one that cannot exist is refused like an unknown hook (401), not as malformed.
AnyName = Annotated[str, Path(min_length=1, max_length=200)]
Names = Annotated[
    list[Annotated[StrictStr, Field(min_length=1, max_length=200, pattern=r"^([A-Za-z0-9_.:\-@]+(\.\*)?|\*)$")]],
    Field(max_length=100),
]


class FilterIn(Strict):
    types: Names = []
    queues: Names = []
    tasks: Names = []


Url = Annotated[
    StrictStr, Field(min_length=8, max_length=2000, pattern=r"^https?://[A-Za-z0-9._~%\-\[\]:]+([/?#][!-~]*)?$")
]
Secret = Annotated[StrictStr, Field(min_length=38, max_length=100, pattern=r"^whsec_[A-Za-z0-9+/]+={0,2}$")]


class EndpointIn(Strict):
    url: Url
    secret: Secret | None = None
    filter: FilterIn | None = None
    description: Annotated[StrictStr, Field(max_length=500)] = ""
    rate_limit: Annotated[StrictInt, Field(ge=1, le=100_000), INTEGRAL] | None = None
    rate_window: Annotated[StrictFloat, Field(ge=0.1, le=86400)] | None = None
    enabled: StrictBool = True


class EndpointPatch(Strict):
    url: Url | None = None
    filter: FilterIn | None = None
    description: Annotated[StrictStr, Field(max_length=500)] | None = None
    rate_limit: Annotated[StrictInt, Field(ge=1, le=100_000), INTEGRAL] | None = None
    rate_window: Annotated[StrictFloat, Field(ge=0.1, le=86400)] | None = None


class RotateIn(Strict):
    secret: Secret | None = None
    overlap: Annotated[StrictFloat, Field(ge=0, le=30 * 86400)] | None = None


Pointer = Annotated[StrictStr, Field(max_length=500, pattern=r"^(/.*)?$")]


class TemplateIn(Strict):
    """How the event's JSON reaches the jobs: payload keys and the JSON Pointer (RFC 6901) of the value each
    takes (``""``: the whole event); ``items``: the pointer of an array that becomes the run's items."""

    payload: Annotated[dict[Annotated[str, Field(min_length=1, max_length=200)], Pointer], Field(max_length=100)] = {}
    items: Pointer | None = None


class InboundIn(Strict):
    name: Annotated[StrictStr, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")]
    schedule: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    secret: Annotated[StrictStr, Field(min_length=16, max_length=200)] | None = None
    template: TemplateIn | None = None


# -- endpoints --------------------------------------------------------------------------------------------
@router.post("/endpoints", status_code=201, responses=WRITE)
async def create_endpoint(body: EndpointIn, request: Request, principal: Writer) -> Response:
    """Register an endpoint (its URL is checked against SSRF: 422 naming ``url``). The answer carries the
    signing secret (``whsec_…``): it is not shown again."""
    endpoint = await context(request).engine.webhooks.create_endpoint(
        principal.tenant, body.url, secret=body.secret, description=body.description,
        filter=body.filter.model_dump() if body.filter else None, rate_limit=body.rate_limit,
        rate_window=body.rate_window, enabled=body.enabled,
    )  # fmt: skip
    return json_response(endpoint_to_json(endpoint, with_secret=True), 201,
                         {"Location": f"/api/v1/webhooks/endpoints/{endpoint.id}"})  # fmt: skip


@router.get("/endpoints", responses=READ)
async def list_endpoints(request: Request, principal: Reader) -> Response:
    endpoints = await context(request).engine.webhooks.list_endpoints(principal.tenant)
    return json_response({"items": [endpoint_to_json(e) for e in endpoints]})


@router.get("/endpoints/{endpoint_id}", responses=READ_ONE)
async def get_endpoint(endpoint_id: Id, request: Request, principal: Reader) -> Response:
    endpoint = await context(request).engine.webhooks.get_endpoint(endpoint_id, principal.tenant)
    return json_response(endpoint_to_json(endpoint))


@router.patch("/endpoints/{endpoint_id}", responses=WRITE_ONE)
async def update_endpoint(endpoint_id: Id, body: EndpointPatch, request: Request, principal: Writer) -> Response:
    changes: dict[str, Any] = {k: v for k, v in body.model_dump(exclude_unset=True).items() if v is not None}
    endpoint = await context(request).engine.webhooks.update_endpoint(endpoint_id, principal.tenant, **changes)
    return json_response(endpoint_to_json(endpoint))


@router.delete("/endpoints/{endpoint_id}", status_code=204, response_class=Response, responses=READ_ONE)
async def delete_endpoint(endpoint_id: Id, request: Request, principal: Writer) -> Response:
    """Delete the endpoint with its deliveries and their attempts."""
    await context(request).engine.webhooks.delete_endpoint(endpoint_id, principal.tenant)
    return Response(status_code=204)


@router.post("/endpoints/{endpoint_id}/disable", responses=WRITE_ONE)
async def disable_endpoint(endpoint_id: Id, request: Request, principal: Writer) -> Response:
    """Stop sending (deliveries wait; they go out when it is enabled again, within their retry window)."""
    endpoint = await context(request).engine.webhooks.set_enabled(endpoint_id, principal.tenant, False)
    return json_response(endpoint_to_json(endpoint))


@router.post("/endpoints/{endpoint_id}/enable", responses=WRITE_ONE)
async def enable_endpoint(endpoint_id: Id, request: Request, principal: Writer) -> Response:
    endpoint = await context(request).engine.webhooks.set_enabled(endpoint_id, principal.tenant, True)
    return json_response(endpoint_to_json(endpoint))


@router.post("/endpoints/{endpoint_id}/rotate-secret", responses=WRITE_ONE)
async def rotate_secret(endpoint_id: Id, request: Request, principal: Writer, body: RotateIn | None = None) -> Response:
    """A new secret signs from now on; the previous one also signs for ``overlap`` seconds (both signatures
    are sent), so receivers can switch without missing a delivery. The answer carries the new secret."""
    b = body or RotateIn()
    endpoint = await context(request).engine.webhooks.rotate_secret(
        endpoint_id, principal.tenant, secret=b.secret, overlap=b.overlap
    )
    return json_response(endpoint_to_json(endpoint, with_secret=True))


# -- deliveries -------------------------------------------------------------------------------------------
@router.get("/deliveries", responses=READ_ONE)
async def list_deliveries(
    request: Request,
    principal: Reader,
    endpoint_id: Annotated[str | None, Query(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:\-]+$")] = None,
    state: Annotated[str | None, Query(pattern=r"^(pending|succeeded|failed)$")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """Newest first; ``state``: pending, succeeded or failed."""
    items = await context(request).engine.webhooks.list_deliveries(principal.tenant, endpoint_id, state, limit)
    return json_response({"items": [delivery_to_json(d) for d in items]})


@router.get("/deliveries/{delivery_id}", responses=READ_ONE)
async def get_delivery(delivery_id: Id, request: Request, principal: Reader) -> Response:
    """The delivery with every attempt (status, latency, error)."""
    webhooks = context(request).engine.webhooks
    delivery = await webhooks.get_delivery(delivery_id, principal.tenant)
    attempts = await webhooks.attempts(delivery_id, principal.tenant)
    return json_response({**delivery_to_json(delivery), "attempts_made": [attempt_to_json(a) for a in attempts]})


@router.get("/deliveries/{delivery_id}/attempts", responses=READ_ONE)
async def list_attempts(delivery_id: Id, request: Request, principal: Reader) -> Response:
    attempts = await context(request).engine.webhooks.attempts(delivery_id, principal.tenant)
    return json_response({"items": [attempt_to_json(a) for a in attempts]})


@router.post("/deliveries/{delivery_id}/resend", status_code=202, responses=WRITE_ONE)
async def resend(delivery_id: Id, request: Request, principal: Writer) -> Response:
    """Send it again now, as a new series of attempts, whatever its state."""
    delivery = await context(request).engine.webhooks.resend(delivery_id, principal.tenant)
    return json_response(delivery_to_json(delivery), 202)


# -- inbound hooks ----------------------------------------------------------------------------------------
@router.post("/inbound", status_code=201, responses=WRITE)
async def create_inbound(body: InboundIn, request: Request, principal: Writer) -> Response:
    """``POST /api/v1/hooks/{tenant}/{name}`` signed with the secret (shown once; a new ``whsec_`` one by
    default) will trigger a run of ``schedule`` with the event; ``template`` maps parts of it into the jobs.
    Names are per tenant (409 for a name this tenant already has)."""
    template = body.template.model_dump() if body.template is not None else None
    hook = await context(request).engine.webhooks.create_inbound(
        principal.tenant, body.name, body.schedule, secret=body.secret, template=template
    )
    return json_response(inbound_to_json(hook, with_secret=True), 201)


@router.get("/inbound", responses=READ)
async def list_inbound(request: Request, principal: Reader) -> Response:
    found = await context(request).engine.webhooks.list_inbound(principal.tenant)
    return json_response({"items": [inbound_to_json(h) for h in found]})


@router.delete("/inbound/{name}", status_code=204, response_class=Response, responses=READ_ONE)
async def delete_inbound(name: HookName, request: Request, principal: Writer) -> Response:
    await context(request).engine.webhooks.delete_inbound(name, principal.tenant)
    return Response(status_code=204)


_HOOK_ANSWERS = problem_responses(401, 409, 413, 422, 429, 503)


@hooks.post("/{tenant}/{name}", status_code=202, responses=_HOOK_ANSWERS)
async def receive(tenant: AnyName, name: AnyName, request: Request) -> Response:
    """An inbound event for the tenant's hook ``name``, signed with its secret in either style:

    - Standard Webhooks: ``webhook-id``, ``webhook-timestamp`` (within ``inbound_tolerance`` of now) and
      ``webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``;
    - ``X-Scheduler-Signature`` (or ``X-Signature``): ``sha256=<hex HMAC-SHA256 of the raw body>``; the
      event's id is then its signature, so the same body is the same event.

    The body is the event's JSON (at most ``inbound_max_body_bytes``: 413; not JSON: 422 naming ``body``).
    Triggers a run of the hook's schedule with it (202 with the run); the hook's template maps parts of it
    into the jobs (422 naming the place in the body it lacks). 401 alike for an unknown hook, no signature or
    a wrong one; 409 for an event id received within ``inbound_replay_window``; 429 with Retry-After over the
    rate limit."""
    return await _receive(request, tenant, name)


@hooks.post("/{name}", status_code=202, responses=_HOOK_ANSWERS)
async def receive_by_signature(name: AnyName, request: Request) -> Response:
    """As ``/api/v1/hooks/{tenant}/{name}``, for the hook of that name whose secret signed the event, in
    whichever tenant (409 when hooks of several tenants take the signature: use the path with the tenant)."""
    return await _receive(request, None, name)


async def _receive(request: Request, tenant: str | None, name: str) -> Response:
    body = await request.body()
    try:
        run = await context(request).engine.webhooks.receive_inbound(tenant, name, body, request.headers)
    except InboundRefused as exc:
        # No instance: the answer to an event that is not signed is the same bytes whatever the path said.
        return problem_response(401, exc.message, field=exc.field)
    except InboundReplay as exc:
        raise ProblemError(409, str(exc), field="webhook-id") from None
    except InboundLimited as exc:
        raise ProblemError(429, str(exc), headers={"Retry-After": str(max(1, math.ceil(exc.wait)))}) from None
    return json_response(run_to_json(run), 202)
