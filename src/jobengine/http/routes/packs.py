"""``/api/v1/packs``: the task pack registry (:mod:`jobengine.packs.registry`).

Scopes: ``packs:read`` lists, shows and downloads approved (or deprecated) versions; ``packs:write``
uploads; ``packs:approve`` approves, rejects, deprecates and archives, simulates a pending version (a run of
its task over the inputs of the last full run, with no effects), and may download a version of any status
(a reviewer reads the code before approving it). Packs are shared by every tenant (like queues): a
pack is code the operators vetted, not a tenant's data. The actor of every step is ``key:<key id>``.

Upload: ``POST /api/v1/packs`` with the ``.tar.gz`` as the raw body (``Content-Type: application/gzip`` or
``application/octet-stream``) or as the ``file`` field of ``multipart/form-data``; an optional declared
digest as the header ``X-Content-SHA256``, the query ``?sha256=`` or the multipart field ``sha256``. 201 with
the stored version (``pending_approval``, or ``invalid`` with the reason), 200 for the same bytes again,
400 when the digest does not match (nothing stored), 409 for other bytes under an existing version.

Download: ``.../versions/{version}/download`` or ``/api/v1/packs/-/blobs/{sha256}``; ``ETag`` is the
digest (``"sha256:<hex>"``) and ``If-None-Match`` with it answers 304.
"""

from __future__ import annotations

import email.parser
import email.policy
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from jobengine.http.auth import Principal, require
from jobengine.http.context import context
from jobengine.http.problems import ProblemError, problem_responses
from jobengine.http.responses import READ, READ_ONE, json_response
from jobengine.packs.errors import ApprovalDenied, DigestMismatch
from jobengine.packs.registry import PackIntegrityError, PackRegistry, event_to_json, version_to_json
from jobengine.ports.packs import RUNNABLE, PackStatus, PackVersion
from jobengine.serialize import run_to_json

router = APIRouter(prefix="/api/v1/packs", tags=["packs"])

Name = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_-]{0,63}$", description="Pack name")]
VersionRef = Annotated[
    str, Path(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z.+\-]{1,64}$", description="A version or channel")
]
Digest = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="sha256 of the archive, hex")]
Reader = Annotated[Principal, Depends(require("packs:read"))]
Writer = Annotated[Principal, Depends(require("packs:write"))]
Approver = Annotated[Principal, Depends(require("packs:approve"))]
#: A reviewer reads the simulation it approves with the key it approves with.
Reviewer = Annotated[Principal, Depends(require("packs:read", "packs:approve"))]

UPLOAD = problem_responses(400, 401, 403, 409, 413, 415, 422, 503)
ACTION = problem_responses(400, 401, 403, 404, 409, 413, 415, 422, 503)
_ARCHIVES = ("application/gzip", "application/x-gzip", "application/octet-stream", "application/x-tar+gzip")


class ReasonIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    reason: str | None = Field(default=None, max_length=1000)


def actor(principal: Principal) -> str:
    return f"key:{principal.key_id}"


def registry(request: Request) -> PackRegistry:
    return context(request).engine.packs


@router.get("", responses=READ, summary="List and search packs")
async def list_packs(
    request: Request, _: Reader, q: Annotated[str | None, Query(max_length=200, description="Substring")] = None
) -> Response:
    found = await registry(request).search(q)
    return json_response({"items": [
        {"name": p.name, "description": p.description, "versions": p.versions, "latest": p.latest,
         "latest_approved": p.latest_approved} for p in found
    ]})  # fmt: skip


@router.post("", status_code=201, responses=UPLOAD, summary="Upload a pack (raw .tar.gz or multipart)",
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/gzip": {"schema": {"type": "string", "format": "binary"}},
                 "multipart/form-data": {"schema": {"type": "object", "required": ["file"], "properties": {
                     "file": {"type": "string", "format": "binary"}, "sha256": {"type": "string"}}}},
             }}})  # fmt: skip
async def upload(
    request: Request,
    principal: Writer,
    sha256: Annotated[str | None, Query(max_length=71, description="Declared sha256 (hex)")] = None,
) -> Response:
    body = await request.body()
    content_type = request.headers.get("content-type", "")
    declared = sha256 or request.headers.get("x-content-sha256")
    media = content_type.split(";")[0].strip().lower()
    if media == "multipart/form-data":
        data, field_digest = _multipart(content_type, body)
        declared = declared or field_digest
    elif media in _ARCHIVES:
        data = body
    else:
        raise ProblemError(415, "send the pack as application/gzip or multipart/form-data (field file)",
                           field="body")  # fmt: skip
    if not data:
        raise ProblemError(422, "the pack archive is empty", field="file")
    try:
        version, created = await registry(request).upload(data, actor(principal), declared)
    except DigestMismatch as exc:
        raise ProblemError(400, str(exc), field="sha256", errors=[("sha256", exc.message)]) from None
    location = f"/api/v1/packs/{version.name}/versions/{version.version}"
    return json_response(version_to_json(version), 201 if created else 200, {"Location": location})


def _multipart(content_type: str, body: bytes) -> tuple[bytes, str | None]:
    parser = email.parser.BytesParser(policy=email.policy.HTTP)
    message = parser.parsebytes(b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body)
    if not message.is_multipart():
        raise ProblemError(400, "the multipart body cannot be parsed", field="body")
    data: bytes | None = None
    digest: str | None = None
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes):
            continue
        if name == "file":
            data = payload
        elif name == "sha256":
            digest = payload.decode("utf-8", "replace").strip()
    if data is None:
        raise ProblemError(422, "the multipart body has no field 'file'", field="file")
    return data, digest


@router.get("/-/blobs/{sha256}", responses=READ_ONE, summary="Download by digest")
async def download_by_digest(request: Request, principal: Reader, sha256: Digest) -> Response:
    version = await registry(request).by_digest(sha256)
    return await _download(request, principal, version)


@router.get("/{name}", responses=READ_ONE, summary="A pack and its versions (semver order)")
async def show_pack(request: Request, _: Reader, name: Name) -> Response:
    versions = await registry(request).versions(name)
    return json_response({"name": name, "description": versions[-1].description,
                          "versions": [version_to_json(v) for v in versions]})  # fmt: skip


@router.get("/{name}/versions", responses=READ_ONE, summary="Versions of a pack, lowest first (semver order)")
async def list_versions(request: Request, _: Reader, name: Name) -> Response:
    versions = await registry(request).versions(name)
    return json_response({"items": [version_to_json(v) for v in versions]})


@router.get("/{name}/versions/{version}", responses=READ_ONE, summary="A version: manifest, digest, status, history")
async def show_version(request: Request, _: Reader, name: Name, version: VersionRef) -> Response:
    reg = registry(request)
    found = await reg.resolve(name, version)
    history = await reg.history(name, found.version)
    return json_response(version_to_json(found, history), headers={"ETag": _etag(found)})


@router.get("/{name}/versions/{version}/history", responses=READ_ONE, summary="The audit trail of a version")
async def version_history(request: Request, _: Reader, name: Name, version: VersionRef) -> Response:
    reg = registry(request)
    found = await reg.resolve(name, version)
    return json_response({"items": [event_to_json(e) for e in await reg.history(name, found.version)]})


@router.get("/{name}/versions/{version}/download", responses=READ_ONE, summary="Download a version's archive")
async def download(request: Request, principal: Reader, name: Name, version: VersionRef) -> Response:
    found = await registry(request).resolve(name, version)
    return await _download(request, principal, found)


def _may_download(principal: Principal, version: PackVersion) -> bool:
    """An approved version: any reader. One awaiting approval: a worker that runs its simulations
    (``packs:simulate``) or a reviewer. Any other: a reviewer (``packs:approve``)."""
    if version.status in RUNNABLE or principal.allows("packs:approve"):
        return True
    return version.status is PackStatus.PENDING and principal.allows("packs:simulate")


async def _download(request: Request, principal: Principal, version: PackVersion) -> Response:
    if not _may_download(principal, version):
        raise ProblemError(409, f"{version.name}@{version.version} is {version.status.value}: only approved "
                           "versions can be downloaded (keys with packs:simulate may read one awaiting approval, "
                           "reviewers with packs:approve any)")  # fmt: skip
    etag = _etag(version)
    if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers={"ETag": etag})
    try:
        data = await registry(request).content(version)
    except PackIntegrityError as exc:
        raise ProblemError(500, str(exc)) from None
    filename = f"{version.name}-{version.version}.tar.gz"
    return Response(data, 200, media_type="application/gzip", headers={
        "ETag": etag, "Content-Disposition": f'attachment; filename="{filename}"',
        "X-Content-SHA256": version.sha256, "Cache-Control": "public, max-age=31536000, immutable"})  # fmt: skip


def _etag(version: PackVersion) -> str:
    return f'"sha256:{version.sha256}"'


@router.post("/{name}/versions/{version}/approve", responses=ACTION, summary="Approve a pending version")
async def approve(request: Request, principal: Approver, name: Name, version: VersionRef) -> Response:
    try:
        found = await registry(request).approve(name, version, actor(principal))
    except ApprovalDenied as exc:
        raise ProblemError(403, str(exc), extra={"rule": "four-eyes"}) from None
    return json_response(version_to_json(found))


async def _action(
    request: Request, principal: Principal, name: str, version: str, which: str, body: ReasonIn | None
) -> Response:
    reg = registry(request)
    fn = {"reject": reg.reject, "deprecate": reg.deprecate, "archive": reg.archive}[which]
    reason = body.reason if body is not None else None
    return json_response(version_to_json(await fn(name, version, actor(principal), reason)))


@router.post("/{name}/versions/{version}/reject", responses=ACTION, summary="Reject a pending version (reason)")
async def reject(
    request: Request, principal: Approver, name: Name, version: VersionRef, body: ReasonIn | None = None
) -> Response:
    return await _action(request, principal, name, version, "reject", body)


@router.post("/{name}/versions/{version}/deprecate", responses=ACTION, summary="Deprecate an approved version")
async def deprecate(
    request: Request, principal: Approver, name: Name, version: VersionRef, body: ReasonIn | None = None
) -> Response:
    return await _action(request, principal, name, version, "deprecate", body)


@router.post("/{name}/versions/{version}/archive", responses=ACTION, summary="Archive a version (for good)")
async def archive(
    request: Request, principal: Approver, name: Name, version: VersionRef, body: ReasonIn | None = None
) -> Response:
    return await _action(request, principal, name, version, "archive", body)


class SimulateIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    task: str | None = Field(default=None, max_length=64, description="The task to simulate (when the pack has more)")
    source: str = Field(default="default", min_length=1, max_length=200, description="The input source of the runs")


@router.post("/{name}/versions/{version}/simulate", status_code=201, responses=ACTION,
             summary="Simulate a pending version on the inputs of the last full run of its task")  # fmt: skip
async def simulate(
    request: Request, principal: Approver, name: Name, version: VersionRef, body: SimulateIn | None = None
) -> Response:
    """A ``simulate`` run of the pending version over the items of the newest completed full run of its task
    (an approved version's): its jobs cause no effects, and its diff is against that run. 409 when the version
    is not pending or no full run exists; 422 naming ``task`` when the pack has several tasks and none is
    named."""
    body = body or SimulateIn()
    engine = context(request).engine
    run = await engine.pack_runs.simulate(name, version, task=body.task, source=body.source,
                                          tenant=principal.tenant, actor=actor(principal))  # fmt: skip
    return json_response(run_to_json(run), 201, {"Location": f"/api/v1/runs/{run.id}"})


@router.get("/{name}/versions/{version}/simulation", responses=READ_ONE,
            summary="The newest simulation of a version and its diff (what its approval shows)")  # fmt: skip
async def simulation(
    request: Request,
    principal: Reviewer,
    name: Name,
    version: VersionRef,
    limit: Annotated[int, Query(ge=0, le=1000, description="How many changed items to list")] = 50,
) -> Response:
    """``counts`` (same / changed / new / gone) and the first ``limit`` items that are not the same, results
    side by side; ``run_id`` null and ``hint`` naming the command when the version was never simulated."""
    review = await context(request).engine.pack_runs.review(name, version, principal.tenant)
    return json_response(review.to_json(limit))
