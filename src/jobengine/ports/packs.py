"""Task pack registry storage (part of every Store).

A pack version is immutable: ``(name, version)`` names one sha256 forever. The content (the ``.tar.gz``)
is not kept here but in a :class:`~jobengine.ports.blobs.BlobStore`, once per digest; the metadata row
carries the status of the approval workflow (:class:`PackStatus`), and every change of it appends a
:class:`PackEvent` in the same transaction (the audit trail). The registry logic (who may do what, which
transition is legal) lives in :mod:`jobengine.packs.registry`; a store only applies guarded writes atomically.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable


class PackStatus(StrEnum):
    PENDING = "pending_approval"
    APPROVED = "approved"
    REJECTED = "rejected"
    DEPRECATED = "deprecated"
    ARCHIVED = "archived"
    INVALID = "invalid"


#: Versions whose code may run: approved, and deprecated (runs what was enqueued; new jobs get a warning).
RUNNABLE: frozenset[PackStatus] = frozenset({PackStatus.APPROVED, PackStatus.DEPRECATED})


@dataclass(frozen=True, slots=True)
class PackVersion:
    name: str
    version: str
    sha256: str
    size: int
    status: PackStatus
    manifest: Mapping[str, Any]  # the validated manifest as JSON (Manifest.to_json)
    description: str
    uploaded_by: str
    uploaded_at: float
    updated_at: float
    status_reason: str | None = None
    approved_by: str | None = None


@dataclass(frozen=True, slots=True)
class NewPackEvent:
    type: str  # pack.uploaded, .approved, .rejected, .deprecated, .archived, .invalid, .simulated
    actor: str
    at: float
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class PackEvent:
    id: int
    name: str
    version: str
    type: str
    actor: str
    at: float
    reason: str | None = None


@runtime_checkable
class PackStore(Protocol):
    async def insert_pack_version(self, version: PackVersion, event: NewPackEvent) -> tuple[PackVersion, bool]:
        """Atomically: no row for ``(name, version)`` -> store the row and the event, and return
        ``(version, True)`` (the content is already in the blob store); a row exists -> change nothing and
        return ``(existing, False)`` (the caller compares digests). Of concurrent inserts of one version
        exactly one gets True."""
        ...

    async def get_pack_version(self, name: str, version: str) -> PackVersion | None: ...

    async def pack_versions_by_digest(self, sha256: str) -> list[PackVersion]:
        """Every version whose content has this digest (usually one)."""
        ...

    async def list_pack_versions(self, name: str | None = None, query: str | None = None) -> list[PackVersion]:
        """Versions of pack ``name`` (or of every pack), optionally only those whose name or description
        contains ``query`` (case-insensitive); ordered by name, then upload time."""
        ...

    async def set_pack_status(
        self,
        name: str,
        version: str,
        expected: Collection[PackStatus],
        status: PackStatus,
        event: NewPackEvent,
        approved_by: str | None = None,
    ) -> PackVersion | None:
        """Move the version to ``status`` (recording ``event.reason`` as the status reason, and
        ``approved_by`` when given) if its status is one of ``expected``; append the event in the same
        transaction. None (nothing changed) when the version is missing or in another status."""
        ...

    async def add_pack_event(self, name: str, version: str, event: NewPackEvent) -> None:
        """Record an event that changes no status (``pack.simulated``)."""
        ...

    async def list_pack_events(self, name: str, version: str | None = None) -> list[PackEvent]:
        """The audit trail of a pack (or one version), oldest first."""
        ...


__all__: Sequence[str] = ("RUNNABLE", "NewPackEvent", "PackEvent", "PackStatus", "PackStore", "PackVersion")
