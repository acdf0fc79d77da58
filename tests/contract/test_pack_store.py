"""The task pack registry's metadata port (PackStore), on every backend: insert once per version, the
winner of concurrent inserts, guarded status changes with their audit events, digest lookup, search.
Content is the BlobStore's (tests/contract/test_blob_store.py)."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace

from jobengine.ports.packs import NewPackEvent, PackStatus, PackStore, PackVersion
from jobengine.ports.store import Store

from .helpers import T0


def _packs(store: Store) -> PackStore:
    assert isinstance(store, PackStore)
    return store


def _version(name: str = "hello", version: str = "1.0.0", content: bytes = b"one", **kw: object) -> PackVersion:
    base = PackVersion(name, version, hashlib.sha256(content).hexdigest(), len(content), PackStatus.PENDING,
                       {"name": name, "version": version, "tasks": {"greet": {"entry": "m:f"}}},
                       "Greets people", "key:alice", T0, T0)  # fmt: skip
    return replace(base, **kw)  # type: ignore[arg-type]


def _event(kind: str = "pack.uploaded", actor: str = "key:alice", reason: str | None = None) -> NewPackEvent:
    return NewPackEvent(kind, actor, T0 + 1, reason)


async def test_insert_once_then_existing(store: Store) -> None:
    packs = _packs(store)
    v = _version()
    stored, created = await packs.insert_pack_version(v, _event())
    assert created and stored == v
    other = _version(content=b"two")
    again, created2 = await packs.insert_pack_version(other, _event())
    assert not created2
    assert again.sha256 == v.sha256  # the stored digest is unchanged
    got = await packs.get_pack_version("hello", "1.0.0")
    assert got is not None and got.manifest == v.manifest and got.status is PackStatus.PENDING
    assert [e.type for e in await packs.list_pack_events("hello")] == ["pack.uploaded"]


async def test_concurrent_inserts_of_one_version_exactly_one_wins(store: Store) -> None:
    packs = _packs(store)
    contents = [f"content {i}".encode() for i in range(6)]
    results = await asyncio.gather(*(packs.insert_pack_version(_version(content=c), _event()) for c in contents))
    winners = [v for v, created in results if created]
    assert len(winners) == 1
    assert all(v.sha256 == winners[0].sha256 for v, _ in results)
    assert len(await packs.list_pack_events("hello")) == 1


async def test_status_changes_are_guarded_and_audited(store: Store) -> None:
    packs = _packs(store)
    await packs.insert_pack_version(_version(), _event())
    ok = await packs.set_pack_status("hello", "1.0.0", [PackStatus.PENDING], PackStatus.APPROVED,
                                     _event("pack.approved", "key:bob"), approved_by="key:bob")  # fmt: skip
    assert ok is not None and ok.status is PackStatus.APPROVED and ok.approved_by == "key:bob"
    assert ok.updated_at == T0 + 1
    # Not pending any more: a second approval (or a reject) changes nothing and records nothing.
    again = await packs.set_pack_status("hello", "1.0.0", [PackStatus.PENDING], PackStatus.REJECTED,
                                        _event("pack.rejected", "key:carol", "no"))  # fmt: skip
    assert again is None
    missing = await packs.set_pack_status("hello", "9.9.9", [PackStatus.PENDING], PackStatus.APPROVED,
                                          _event("pack.approved"))  # fmt: skip
    assert missing is None
    dep = await packs.set_pack_status("hello", "1.0.0", [PackStatus.APPROVED], PackStatus.DEPRECATED,
                                      _event("pack.deprecated", "key:bob", "use 2.0"))  # fmt: skip
    assert dep is not None and dep.status_reason == "use 2.0" and dep.approved_by == "key:bob"
    history = await packs.list_pack_events("hello", "1.0.0")
    assert [(e.type, e.actor, e.reason) for e in history] == [
        ("pack.uploaded", "key:alice", None),
        ("pack.approved", "key:bob", None),
        ("pack.deprecated", "key:bob", "use 2.0"),
    ]
    assert history[0].id < history[1].id < history[2].id


async def test_listing_search_and_digest_lookup(store: Store) -> None:
    packs = _packs(store)
    await packs.insert_pack_version(_version("hello", "1.0.0", b"a"), _event())
    await packs.insert_pack_version(_version("hello", "1.10.0", b"b", uploaded_at=T0 + 5), _event())
    await packs.insert_pack_version(_version("etl", "0.1.0", b"c", description="Moves DATA around"), _event())
    names = [(v.name, v.version) for v in await packs.list_pack_versions()]
    assert names == [("etl", "0.1.0"), ("hello", "1.0.0"), ("hello", "1.10.0")]
    assert [v.version for v in await packs.list_pack_versions("hello")] == ["1.0.0", "1.10.0"]
    assert [v.name for v in await packs.list_pack_versions(None, "data")] == ["etl"]  # description, any case
    assert [v.name for v in await packs.list_pack_versions(None, "%")] == []  # no wildcards
    by_digest = await packs.pack_versions_by_digest(hashlib.sha256(b"b").hexdigest())
    assert [(v.name, v.version) for v in by_digest] == [("hello", "1.10.0")]
    assert await packs.pack_versions_by_digest("0" * 64) == []


async def test_an_event_is_added_without_changing_the_status(store: Store) -> None:
    packs = _packs(store)
    await packs.insert_pack_version(_version(), _event())
    await packs.add_pack_event("hello", "1.0.0", _event("pack.simulated", "key:bob", "run r1 against run r0"))
    got = await packs.get_pack_version("hello", "1.0.0")
    assert got is not None and got.status is PackStatus.PENDING and got.updated_at == T0
    history = await packs.list_pack_events("hello", "1.0.0")
    assert [(e.type, e.actor, e.reason) for e in history] == [
        ("pack.uploaded", "key:alice", None),
        ("pack.simulated", "key:bob", "run r1 against run r0"),
    ]
