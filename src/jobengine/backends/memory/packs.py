"""The task pack registry in memory (:class:`~jobengine.ports.packs.PackStore`), mixed into MemoryStore.
State is created on first use, under the store's lock, so the mixin needs nothing from ``__init__``."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Protocol

from jobengine.ports.packs import NewPackEvent, PackEvent, PackStatus, PackVersion


class _Locked(Protocol):
    _lock: asyncio.Lock


@dataclass
class _PackState:
    versions: dict[tuple[str, str], PackVersion] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)  # MemoryBlobStore's (packs_blob_store = database)
    events: list[PackEvent] = field(default_factory=list)

    def append(self, name: str, version: str, e: NewPackEvent) -> None:
        self.events.append(PackEvent(len(self.events) + 1, name, version, e.type, e.actor, e.at, e.reason))


def _state(store: object) -> _PackState:
    state = getattr(store, "_pack_state", None)
    if state is None:
        state = _PackState()
        store._pack_state = state  # type: ignore[attr-defined]
    return state


class MemoryPackMixin:
    async def insert_pack_version(self: _Locked, version: PackVersion, event: NewPackEvent) -> tuple[PackVersion, bool]:
        async with self._lock:
            s = _state(self)
            key = (version.name, version.version)
            if key in s.versions:
                return s.versions[key], False
            s.versions[key] = version
            s.append(version.name, version.version, event)
            return version, True

    async def get_pack_version(self: _Locked, name: str, version: str) -> PackVersion | None:
        return _state(self).versions.get((name, version))

    async def pack_versions_by_digest(self: _Locked, sha256: str) -> list[PackVersion]:
        return [v for v in _state(self).versions.values() if v.sha256 == sha256]

    async def list_pack_versions(self: _Locked, name: str | None = None, query: str | None = None) -> list[PackVersion]:
        q = query.lower() if query else None
        found = [
            v
            for v in _state(self).versions.values()
            if (name is None or v.name == name) and (q is None or q in v.name.lower() or q in v.description.lower())
        ]
        return sorted(found, key=lambda v: (v.name, v.uploaded_at, v.version))

    async def set_pack_status(
        self: _Locked,
        name: str,
        version: str,
        expected: Collection[PackStatus],
        status: PackStatus,
        event: NewPackEvent,
        approved_by: str | None = None,
    ) -> PackVersion | None:
        async with self._lock:
            s = _state(self)
            current = s.versions.get((name, version))
            if current is None or current.status not in expected:
                return None
            changed = dataclasses.replace(
                current,
                status=status,
                status_reason=event.reason,
                updated_at=event.at,
                approved_by=approved_by if approved_by is not None else current.approved_by,
            )
            s.versions[(name, version)] = changed
            s.append(name, version, event)
            return changed

    async def list_pack_events(self: _Locked, name: str, version: str | None = None) -> list[PackEvent]:
        return [e for e in _state(self).events if e.name == name and (version is None or e.version == version)]
