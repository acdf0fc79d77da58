"""The pack registry: upload, list, show, the approval workflow, and content that is verified when read.

The store applies each write atomically; this module decides what is allowed: an upload is inspected
before anything is written (an unreadable archive or manifest is refused, a manifest whose code does not
hold up is stored ``invalid``); the content goes to the blob store before the version row commits;
``name@version`` names one sha256 forever (the same bytes again are idempotent, other bytes PackConflict);
the workflow is ``pending_approval → approved | rejected``, ``approved → deprecated → archived``, with
four-eyes approval; :meth:`PackRegistry.runnable` hands out only approved or deprecated versions, re-hashed.
The rules and their reasons: docs/packs.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobengine.core.bounds import check_text
from jobengine.core.clock import Clock
from jobengine.errors import InvalidJob, NotFound, StoreError
from jobengine.packs import semver, verify
from jobengine.packs.archive import Limits
from jobengine.packs.errors import ApprovalDenied, DigestMismatch, InvalidPack, PackConflict
from jobengine.packs.manifest import PACK_NAME
from jobengine.ports.blobs import BlobStore
from jobengine.ports.packs import RUNNABLE, NewPackEvent, PackEvent, PackStatus, PackStore, PackVersion

if TYPE_CHECKING:
    from jobengine.settings import Settings

SHA256 = re.compile(r"^[0-9a-f]{64}\Z")  # \Z: "$" would let a trailing newline through
CHANNELS = ("latest", "stable")  # highest approved version; the same without pre-releases
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
SIMULATED = "pack.simulated"
_SIMULATED = re.compile(r"^run (\S+) against run \S+\Z")


class PackIntegrityError(StoreError):
    """Stored content no longer hashes to its digest (corruption or tampering): it is never handed out."""


@dataclass(frozen=True, slots=True)
class PackSummary:
    name: str
    description: str
    versions: int
    latest: str  # highest version, any status
    latest_approved: str | None


def four_eyes_from(settings: Settings) -> bool:
    mode = settings.packs_four_eyes
    if mode == "auto":
        return settings.api_host not in _LOOPBACK
    return mode == "on"


class PackRegistry:
    def __init__(
        self, store: PackStore, blobs: BlobStore, clock: Clock, *, four_eyes: bool, limits: Limits | None = None
    ) -> None:
        self.store = store
        self.blobs = blobs
        self.clock = clock
        self.four_eyes = four_eyes
        self.limits = limits or Limits()

    # -- upload -------------------------------------------------------------------------------------
    async def upload(self, data: bytes, actor: str, declared_sha256: str | None = None) -> tuple[PackVersion, bool]:
        """Store a pack; returns (version, created). Raises DigestMismatch, InvalidPack, PackConflict."""
        digest = hashlib.sha256(data).hexdigest()
        if declared_sha256 is not None:
            declared = declared_sha256.strip().lower().removeprefix("sha256:")
            if not SHA256.match(declared):
                raise InvalidPack("sha256", "must be 64 hexadecimal characters")
            if declared != digest:
                raise DigestMismatch(declared, digest)
        if len(data) > self.limits.max_compressed:
            raise InvalidPack("archive", f"the archive is larger than {self.limits.max_compressed} bytes")
        found = await asyncio.to_thread(verify.inspect, data, self.limits)
        if found.manifest is None:
            raise InvalidPack(found.field or "archive", found.problem or "unreadable pack")
        m = found.manifest
        now = self.clock.now()
        status = PackStatus.INVALID if found.problem else PackStatus.PENDING
        reason = f"{found.field}: {found.problem}" if found.problem else None
        version = PackVersion(m.name, m.version, digest, len(data), status, m.to_json(), m.description, actor, now,
                              now, reason)  # fmt: skip
        event = NewPackEvent("pack.invalid" if found.problem else "pack.uploaded", actor, now, reason)
        existing = await self.store.get_pack_version(m.name, m.version)
        if existing is None:  # else nothing to write: the conflict (or the idempotent answer) is below
            await self.blobs.put(digest, data)
            stored, created = await self.store.insert_pack_version(version, event)
            if created:
                return stored, True
            if stored.sha256 != digest:  # lost a race to other bytes: no version can ever name this blob
                with contextlib.suppress(StoreError):
                    await self.blobs.delete(digest)
        else:
            stored = existing
            if existing.sha256 == digest and existing.status is not PackStatus.ARCHIVED:
                await self.blobs.put(digest, data)  # idempotent; puts back content lost from the blob store
        ref = f"{m.name}@{m.version}"
        if stored.status is PackStatus.ARCHIVED:
            raise PackConflict(f"{ref} is archived: an archived version is never published again")
        if stored.sha256 != digest:
            raise PackConflict(f"{ref} already exists with other content (sha256 {stored.sha256}); versions are "
                               "immutable: publish a new version")  # fmt: skip
        return stored, False

    # -- reads --------------------------------------------------------------------------------------
    async def get(self, name: str, version: str) -> PackVersion:
        _check_name(name)
        found = await self.store.get_pack_version(name, version)
        if found is None:
            raise NotFound("pack version", f"{name}@{version}")
        return found

    async def versions(self, name: str) -> list[PackVersion]:
        """Every version of ``name``, in semver order (lowest first). NotFound when there is none."""
        _check_name(name)
        found = await self.store.list_pack_versions(name)
        if not found:
            raise NotFound("pack", name)
        return sorted(found, key=lambda v: semver.sort_key(v.version))

    async def search(self, query: str | None = None) -> list[PackSummary]:
        by_name: dict[str, list[PackVersion]] = {}
        for v in await self.store.list_pack_versions(None, query or None):
            by_name.setdefault(v.name, []).append(v)
        out = []
        for name, vs in sorted(by_name.items()):
            vs.sort(key=lambda v: semver.sort_key(v.version))
            approved = [v for v in vs if v.status is PackStatus.APPROVED]
            out.append(PackSummary(name, vs[-1].description, len(vs), vs[-1].version,
                                   approved[-1].version if approved else None))  # fmt: skip
        return out

    async def history(self, name: str, version: str | None = None) -> list[PackEvent]:
        return await self.store.list_pack_events(name, version)

    async def resolve(self, name: str, ref: str) -> PackVersion:
        """``ref`` is a version or a channel (``latest``, ``stable``); NotFound when nothing matches."""
        if ref in CHANNELS:
            vs = [v for v in await self.store.list_pack_versions(name) if v.status is PackStatus.APPROVED]
            if ref == "stable":
                vs = [v for v in vs if not semver.parse(v.version).prerelease]
            if not vs:
                raise NotFound("approved pack version", f"{name}@{ref}")
            return max(vs, key=lambda v: semver.sort_key(v.version))
        return await self.get(name, ref)

    async def content(self, version: PackVersion) -> bytes:
        """The stored bytes of ``version``, verified against its digest (PackIntegrityError otherwise)."""
        data = await self.blobs.get(version.sha256)
        if data is None:
            raise NotFound("pack content", version.sha256)
        actual = hashlib.sha256(data).hexdigest()
        if actual != version.sha256:
            raise PackIntegrityError(f"content of {version.name}@{version.version} hashes to {actual}, not "
                                     f"{version.sha256}: refusing it")  # fmt: skip
        return data

    async def by_digest(self, sha256: str) -> PackVersion:
        if not SHA256.match(sha256):
            raise InvalidPack("sha256", "must be 64 hexadecimal characters")
        found = await self.store.pack_versions_by_digest(sha256)
        if not found:
            raise NotFound("pack content", sha256)
        runnable = [v for v in found if v.status in RUNNABLE]
        return runnable[0] if runnable else found[0]

    async def runnable(self, version: PackVersion) -> bytes:
        """:meth:`content`, for a version that may run (approved or deprecated); PackConflict otherwise."""
        if version.status not in RUNNABLE:
            raise PackConflict(f"{version.name}@{version.version} is {version.status.value}: only approved "
                               "versions can be downloaded to run")  # fmt: skip
        return await self.content(version)

    async def check_blobs(self) -> str:
        """A readiness check (``/readyz`` check ``packs``): the blob store's health; StoreError when down."""
        h = await self.blobs.health()
        if not h.ok:
            raise StoreError(f"packs_blob_store: {h.backend}: {h.detail}")
        return f"{h.backend}, {h.latency_ms:.1f} ms: {h.detail}"

    # -- simulations --------------------------------------------------------------------------------
    async def record_simulation(self, version: PackVersion, actor: str, run_id: str, base_run_id: str) -> None:
        """Note in the version's history that ``actor`` started simulate run ``run_id`` of it, compared with
        ``base_run_id`` (the approval shows the newest one's diff)."""
        event = NewPackEvent(SIMULATED, actor, self.clock.now(), f"run {run_id} against run {base_run_id}")
        await self.store.add_pack_event(version.name, version.version, event)

    async def simulations(self, name: str, version: str) -> list[str]:
        """The ids of the simulate runs of ``name@version``, oldest first."""
        events = await self.store.list_pack_events(name, version)
        return [m.group(1) for e in events if e.type == SIMULATED and (m := _SIMULATED.match(e.reason or ""))]

    # -- workflow -----------------------------------------------------------------------------------
    async def approve(self, name: str, version: str, actor: str) -> PackVersion:
        current = await self.get(name, version)
        if self.four_eyes and current.uploaded_by == actor:
            raise ApprovalDenied(f"four-eyes: {actor} uploaded {name}@{version} and cannot approve it too")
        return await self._move(current, (PackStatus.PENDING,), PackStatus.APPROVED, "pack.approved", actor, None,
                                approved_by=actor)  # fmt: skip

    async def reject(self, name: str, version: str, actor: str, reason: object) -> PackVersion:
        current = await self.get(name, version)
        return await self._move(current, (PackStatus.PENDING,), PackStatus.REJECTED, "pack.rejected", actor,
                                _reason(reason))  # fmt: skip

    async def deprecate(self, name: str, version: str, actor: str, reason: object) -> PackVersion:
        current = await self.get(name, version)
        return await self._move(current, (PackStatus.APPROVED,), PackStatus.DEPRECATED, "pack.deprecated", actor,
                                _reason(reason))  # fmt: skip

    async def archive(self, name: str, version: str, actor: str, reason: object = None) -> PackVersion:
        current = await self.get(name, version)
        text = _reason(reason) if reason not in (None, "") else None
        allowed = (PackStatus.DEPRECATED, PackStatus.REJECTED, PackStatus.INVALID)
        return await self._move(current, allowed, PackStatus.ARCHIVED, "pack.archived", actor, text)

    async def _move(
        self,
        current: PackVersion,
        allowed: Collection[PackStatus],
        status: PackStatus,
        kind: str,
        actor: str,
        reason: str | None,
        approved_by: str | None = None,
    ) -> PackVersion:
        ref = f"{current.name}@{current.version}"
        if reason is not None:
            check_text("reason", reason)
        if current.status in allowed:
            event = NewPackEvent(kind, actor, self.clock.now(), reason)
            moved = await self.store.set_pack_status(current.name, current.version, allowed, status, event, approved_by)
            if moved is not None:
                return moved
            current = await self.get(current.name, current.version)  # changed under us: report what it is now
        wanted = " or ".join(s.value for s in allowed)
        raise PackConflict(f"{ref} is {current.status.value}; {kind.removeprefix('pack.')} needs {wanted}")


def _check_name(name: str) -> None:
    if not PACK_NAME.match(name):
        raise InvalidPack("name", f"not a pack name: {name!r}")


def _reason(reason: object) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidJob("reason", "a reason is required")
    if len(reason) > 1000:
        raise InvalidJob("reason", "at most 1000 characters")
    return reason.strip()


def version_to_json(v: PackVersion, history: list[PackEvent] | None = None) -> dict[str, Any]:
    from jobengine.core.clock import iso

    out: dict[str, Any] = {
        "name": v.name, "version": v.version, "sha256": v.sha256, "digest": f"sha256:{v.sha256}", "size": v.size,
        "status": v.status.value, "status_reason": v.status_reason, "description": v.description,
        "uploaded_by": v.uploaded_by, "uploaded_at": iso(v.uploaded_at), "updated_at": iso(v.updated_at),
        "approved_by": v.approved_by, "manifest": dict(v.manifest),
    }  # fmt: skip
    if history is not None:
        out["approvals"] = [
            {"by": e.actor, "at": iso(e.at)} for e in history if e.type == "pack.approved" and e.version == v.version
        ]
        out["history"] = [event_to_json(e) for e in history]
    return out


def event_to_json(e: PackEvent) -> dict[str, Any]:
    from jobengine.core.clock import iso

    return {"id": e.id, "type": e.type, "name": e.name, "version": e.version, "actor": e.actor, "at": iso(e.at),
            "reason": e.reason}  # fmt: skip


def registry_for(store: PackStore, blobs: BlobStore, settings: Settings, clock: Clock) -> PackRegistry:
    """The registry over ``store`` (metadata) and ``blobs`` (content) configured from ``settings``."""
    limits = Limits(max_compressed=settings.packs_max_bytes)
    return PackRegistry(store, blobs, clock, four_eyes=four_eyes_from(settings), limits=limits)
