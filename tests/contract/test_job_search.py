"""Searching jobs: id prefixes, creation time and payload text, on every store; and the short id form."""

from __future__ import annotations

from typing import cast

from jobengine.core.ids import IdKind, JobId, short_id
from jobengine.core.models import JobFilter
from jobengine.core.states import JobState
from jobengine.ports.auth import ApiKey, KeyStore
from jobengine.ports.store import Store

from .helpers import T0, enqueue, new


async def test_a_thousand_jobs_of_one_batch_have_distinct_short_ids_that_find_them(store: Store) -> None:
    jobs = await enqueue(store, *[new(payload={"n": i}) for i in range(1000)])
    shorts = [short_id(j.id) for j in jobs]
    assert len(set(shorts)) == 1000
    assert all(j.id.startswith(s) for j, s in zip(jobs, shorts, strict=True))
    for job in jobs[::97]:  # each short id, used as a prefix, finds its job and only it
        assert [j.id for j in await store.list_jobs(JobFilter(id_prefix=short_id(job.id), limit=5))] == [job.id]


async def test_an_id_prefix_is_a_range_of_ids(store: Store) -> None:
    ids = ["abc-1", "abc-2", "abd-1", "ab", "abc"]
    await enqueue(store, *[new(id=JobId(i)) for i in ids])
    found = await store.list_jobs(JobFilter(id_prefix="abc", limit=10))
    assert [j.id for j in found] == ["abc-2", "abc-1", "abc"]  # newest (greatest id) first
    assert [j.id for j in await store.list_jobs(JobFilter(id_prefix="abc-", limit=10))] == ["abc-2", "abc-1"]
    assert [j.id for j in await store.list_jobs(JobFilter(id_prefix="ab", limit=2))] == ["abd-1", "abc-2"]
    assert await store.list_jobs(JobFilter(id_prefix="abe", limit=10)) == []
    # with a tenant and states, the other path of the store
    found = await store.list_jobs(JobFilter(tenant="default", states=(JobState.QUEUED,), id_prefix="abc-", limit=10))
    assert [j.id for j in found] == ["abc-2", "abc-1"]
    assert await store.list_jobs(JobFilter(tenant="other", id_prefix="abc", limit=10)) == []


async def test_ids_with_prefix_are_in_id_order_of_a_tenant_for_each_kind(store: Store) -> None:
    await enqueue(store, *[new(id=JobId(i)) for i in ["abc-2", "abc", "abc-1", "abd-1"]])
    await enqueue(store, new(id=JobId("abc-3"), tenant="other"))
    assert await store.ids_with_prefix(IdKind.JOB, "abc", None, 10) == ["abc", "abc-1", "abc-2", "abc-3"]
    assert await store.ids_with_prefix(IdKind.JOB, "abc", "default", 2) == ["abc", "abc-1"]
    assert await store.ids_with_prefix(IdKind.JOB, "abc-", "other", 10) == ["abc-3"]
    assert await store.ids_with_prefix(IdKind.JOB, "abe", None, 10) == []
    keys = cast(KeyStore, store)
    for key_id, tenant in [("0a1b2c3d4e5f", "acme"), ("0a1b2c3d4e60", "acme"), ("0a1b2c3e0000", "globex")]:
        await keys.insert_api_key(ApiKey(key_id, tenant, "", ("admin",), "hash-" + key_id, T0))
    assert await store.ids_with_prefix(IdKind.KEY, "0a1b2c3d", None, 10) == ["0a1b2c3d4e5f", "0a1b2c3d4e60"]
    assert await store.ids_with_prefix(IdKind.KEY, "0a1b2c3", "globex", 10) == ["0a1b2c3e0000"]
    assert await store.ids_with_prefix(IdKind.RUN, "0a1b2c3", None, 10) == []


async def test_created_after_and_before_are_exclusive_bounds(store: Store) -> None:
    first = await enqueue(store, new(), now=T0)
    second = await enqueue(store, new(), now=T0 + 10)
    third = await enqueue(store, new(), now=T0 + 20)
    found = await store.list_jobs(JobFilter(created_after=T0, created_before=T0 + 20))
    assert [j.id for j in found] == [second[0].id]
    found = await store.list_jobs(JobFilter(tenant="default", created_after=T0 + 5))
    assert [j.id for j in found] == [third[0].id, second[0].id]
    found = await store.list_jobs(JobFilter(created_before=T0 + 10))
    assert [j.id for j in found] == [first[0].id]


async def test_payload_text_is_a_substring_of_the_payload(store: Store) -> None:
    ada, alan, grace = await enqueue(
        store,
        new(payload={"name": "Ada Lovelace", "n": 1}),
        new(payload={"name": "Alan", "n": 2}),
        new(task="other", payload=["Grace", {"nested": "Ada"}]),
    )
    found = await store.list_jobs(JobFilter(payload_text="Ada"))
    assert [j.id for j in found] == [grace.id, ada.id]
    assert await store.list_jobs(JobFilter(payload_text="ada lovelace")) == []  # case as written
    found = await store.list_jobs(JobFilter(tenant="default", task="other", payload_text="Ada"))
    assert [j.id for j in found] == [grace.id]
    assert [j.id for j in await store.list_jobs(JobFilter(payload_text='"name"', limit=1))] == [alan.id]
    assert await store.list_jobs(JobFilter(payload_text="%")) == []  # no pattern characters
