"""Task packs (the registry, through ``engine.packs``): the packs, a pack's versions in semver order, a
version (manifest, digest, size, uploader, approvals, history, and its newest simulation's diff against the
last full run, so a reviewer approves what they saw) with simulate / approve / reject / deprecate / archive,
and a line diff of two versions' manifests.

Scopes as in ``http/routes/packs.py``: ``packs:read`` to see, ``packs:approve`` for every workflow step
(approve, reject, deprecate, archive). The actor is ``key:<key id>``, the identity the API records, so
four-eyes compares like with like: the key that uploaded a version cannot approve it from here either.
Packs are shared by every tenant (like queues).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from jobengine.dashboard import session as sess
from jobengine.dashboard.base import HtmlRoute, engine, render, see_other
from jobengine.dashboard.session import DashboardError, Session
from jobengine.packs.errors import ApprovalDenied
from jobengine.packs.registry import PackRegistry
from jobengine.ports.packs import PackStatus, PackVersion

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_VERSION = re.compile(r"^[0-9A-Za-z.+\-]{1,64}$")
#: Which workflow step each status allows (registry.PackRegistry decides; this only picks the buttons).
STEPS: dict[PackStatus, tuple[str, ...]] = {
    PackStatus.PENDING: ("approve", "reject"),
    PackStatus.APPROVED: ("deprecate",),
    PackStatus.DEPRECATED: ("archive",),
    PackStatus.REJECTED: ("archive",),
    PackStatus.INVALID: ("archive",),
    PackStatus.ARCHIVED: (),
}
VERBS = ("approve", "reject", "deprecate", "archive", "simulate")
DIFF_CONTEXT = 3


def _registry(request: Request) -> PackRegistry:
    return engine(request).packs


def _name(value: str) -> str:
    if not _NAME.match(value):
        raise DashboardError(404, f"no pack {value!r}", "name")
    return value


def _version(value: str, field: str = "version") -> str:
    if not _VERSION.match(value):
        raise DashboardError(404 if field == "version" else 422, f"no version {value!r}", field)
    return value


def actor(session: Session) -> str:
    """The registry's identity of the session's key (as the API records it: four-eyes compares these)."""
    return f"key:{session.principal.key_id}"


def manifest_lines(manifest: Mapping[str, Any]) -> list[str]:
    return json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False, default=str).splitlines()


def diff_rows(old: PackVersion, new: PackVersion) -> list[tuple[str, str]]:
    """A unified line diff of two manifests as (kind, text) rows: kind is head, hunk, add, del or same. The
    template writes the text escaped."""
    rows: list[tuple[str, str]] = []
    lines = difflib.unified_diff(
        manifest_lines(old.manifest), manifest_lines(new.manifest), f"{old.name}@{old.version}",
        f"{new.name}@{new.version}", n=DIFF_CONTEXT, lineterm="",
    )  # fmt: skip
    for line in lines:
        if line.startswith(("---", "+++")):
            rows.append(("head", line))
        elif line.startswith("@@"):
            rows.append(("hunk", line))
        elif line.startswith("+"):
            rows.append(("add", line))
        elif line.startswith("-"):
            rows.append(("del", line))
        else:
            rows.append(("same", line))
    return rows


async def packs_values(request: Request, session: Session) -> dict[str, Any]:
    """The packs page (``?q=`` a search) and its live stream."""
    q = request.query_params.get("q", "").strip()
    if len(q) > 200:
        raise DashboardError(422, "at most 200 characters", "q")
    packs = await _registry(request).search(q or None)
    return {"packs": packs, "q": q}


@router.get("/packs")
async def packs_page(request: Request) -> Response:
    session = await sess.require(request, "packs:read")
    return render(request, "packs.html", session, await packs_values(request, session))


@router.get("/packs/{name}")
async def pack_page(request: Request, name: str) -> Response:
    session = await sess.require(request, "packs:read")
    versions = await _registry(request).versions(_name(name))
    values = {"name": name, "versions": list(reversed(versions)), "description": versions[-1].description}
    return render(request, "pack.html", session, values)


@router.get("/packs/{name}/diff")
async def diff_page(request: Request, name: str) -> Response:
    session = await sess.require(request, "packs:read")
    reg = _registry(request)
    name = _name(name)
    versions = await reg.versions(name)
    default_old = versions[-2].version if len(versions) > 1 else versions[-1].version
    old_ref = _version(request.query_params.get("from", "").strip() or default_old, "from")
    new_ref = _version(request.query_params.get("to", "").strip() or versions[-1].version, "to")
    by_version = {v.version: v for v in versions}
    for field, ref in (("from", old_ref), ("to", new_ref)):
        if ref not in by_version:
            raise DashboardError(422, f"{name} has no version {ref!r}", field)
    old, new = by_version[old_ref], by_version[new_ref]
    values = {"name": name, "old": old, "new": new, "rows": diff_rows(old, new),
              "versions": list(reversed(versions))}  # fmt: skip
    return render(request, "pack_diff.html", session, values)


@router.get("/packs/{name}/versions/{version}")
async def version_page(request: Request, name: str, version: str) -> Response:
    session = await sess.require(request, "packs:read")
    reg = _registry(request)
    found = await reg.get(_name(name), _version(version))
    history = await reg.history(found.name, found.version)
    review = await engine(request).pack_runs.review(found.name, found.version, session.tenant)
    me = actor(session)
    values = {
        "v": found, "history": history, "steps": STEPS[found.status],
        "manifest": "\n".join(manifest_lines(found.manifest)),
        "approvals": [e for e in history if e.type == "pack.approved"], "can_approve": session.allows("packs:approve"),
        "four_eyes_blocks": reg.four_eyes and found.uploaded_by == me,
        "review": review, "entries": review.changed(), "pending": found.status is PackStatus.PENDING,
    }  # fmt: skip
    return render(request, "pack_version.html", session, values)


@router.post("/packs/{name}/versions/{version}/{verb}")
async def version_action(request: Request, name: str, version: str, verb: str) -> Response:
    session, form = await sess.action(request, "packs:approve")
    if verb not in VERBS:
        raise DashboardError(404, f"no action {verb!r} ({', '.join(VERBS)})", "action")
    reg = _registry(request)
    name, version = _name(name), _version(version)
    me = actor(session)
    reason: str | None = form.get("reason", "")
    if verb == "approve":
        try:
            moved = await reg.approve(name, version, me)
        except ApprovalDenied:
            raise DashboardError(
                403, f"four-eyes: your key uploaded {name}@{version}, so another key with packs:approve must "
                "approve it", "key",
            ) from None  # fmt: skip
    elif verb == "reject":
        moved = await reg.reject(name, version, me, reason)
    elif verb == "deprecate":
        moved = await reg.deprecate(name, version, me, reason)
    elif verb == "simulate":
        task = form.get("task", "").strip() or None
        source = form.get("source", "").strip() or "default"
        run = await engine(request).pack_runs.simulate(name, version, task=task, source=source,
                                                        tenant=session.tenant, actor=me)  # fmt: skip
        return see_other(f"/packs/{name}/versions/{version}", f"simulate run {run.id} of {name}@{version} started")
    else:
        moved = await reg.archive(name, version, me, reason or None)
    return see_other(f"/packs/{name}/versions/{version}", f"{name}@{version} is now {moved.status.value}")
