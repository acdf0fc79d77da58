"""The optional ports of the HTTP layer, on every backend: API keys, dashboard sessions, idempotency records,
queue settings, filtered claims, purging the dead-letter and the event log's bounds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobengine.core import events as ev
from jobengine.core.models import FailOutcome, NewJob
from jobengine.core.states import JobState
from jobengine.ports.auth import ApiKey, ClaimState, IdempotencyStore, KeyStore, SessionRecord, SessionStore
from jobengine.ports.deadletter import DeadLetterStore
from jobengine.ports.eventlog import EventLogStore, EventPruneStore
from jobengine.ports.flow import FlowStore
from jobengine.ports.queues import QueueSettings, QueueSettingsStore
from jobengine.ports.store import Store

from .helpers import T0, claim, enqueue, failure, get


def _keys(store: Store) -> KeyStore:
    assert isinstance(store, KeyStore)
    return store


def _sessions(store: Store) -> SessionStore:
    assert isinstance(store, SessionStore)
    return store


def _idem(store: Store) -> IdempotencyStore:
    assert isinstance(store, IdempotencyStore)
    return store


def _queues(store: Store) -> QueueSettingsStore:
    assert isinstance(store, QueueSettingsStore)
    return store


def _dead(store: Store) -> DeadLetterStore:
    assert isinstance(store, DeadLetterStore)
    return store


def test_the_store_has_every_port_the_engine_hands_its_services(store: Store) -> None:
    # The Engine passes the store to keys, requests, queues, event_log and flow typed as these ports, unprobed.
    ports = (KeyStore, SessionStore, IdempotencyStore, QueueSettingsStore, DeadLetterStore, EventLogStore, FlowStore)
    assert [p.__name__ for p in ports if not isinstance(store, p)] == []


async def test_api_keys_are_stored_listed_and_revoked(store: Store) -> None:
    keys = _keys(store)
    a = ApiKey("aaaaaaaaaaaa", "acme", "ci", ("jobs:read", "worker"), "h" * 64, T0)
    b = ApiKey("bbbbbbbbbbbb", "other", "", ("admin",), "g" * 64, T0 + 1)
    await keys.insert_api_key(a)
    await keys.insert_api_key(b)
    assert await keys.get_api_key("aaaaaaaaaaaa") == a
    assert await keys.get_api_key("cccccccccccc") is None
    assert await keys.list_api_keys() == [a, b]
    assert await keys.list_api_keys("acme") == [a]
    revoked = await keys.revoke_api_key("aaaaaaaaaaaa", T0 + 5)
    assert revoked is not None and revoked.revoked_at == T0 + 5 and not revoked.active
    again = await keys.revoke_api_key("aaaaaaaaaaaa", T0 + 9)
    assert again is not None and again.revoked_at == T0 + 5  # the first revocation time stays
    assert await keys.revoke_api_key("cccccccccccc", T0) is None
    with pytest.raises(Exception):  # noqa: B017 - a taken id is the store's error, whichever it is
        await keys.insert_api_key(a)


async def test_an_idempotency_key_is_claimed_once_then_replayed(store: Store) -> None:
    idem = _idem(store)
    first = await idem.claim_idempotency_key("acme", "k", "fp1", T0, 60, 3600)
    assert first.state is ClaimState.CLAIMED
    busy = await idem.claim_idempotency_key("acme", "k", "fp1", T0 + 1, 60, 3600)
    assert busy.state is ClaimState.IN_FLIGHT and busy.record.fingerprint == "fp1"
    other_tenant = await idem.claim_idempotency_key("globex", "k", "fp2", T0 + 1, 60, 3600)
    assert other_tenant.state is ClaimState.CLAIMED  # keys are scoped per tenant
    await idem.finish_idempotency_key("acme", "k", 201, "application/json", b'{"id":1}')
    done = await idem.claim_idempotency_key("acme", "k", "fp1", T0 + 2, 60, 3600)
    assert done.state is ClaimState.DONE
    assert (done.record.status, done.record.content_type, done.record.body) == (201, "application/json", b'{"id":1}')
    mismatch = await idem.claim_idempotency_key("acme", "k", "fp-other", T0 + 3, 60, 3600)
    assert mismatch.state is ClaimState.DONE and mismatch.record.fingerprint == "fp1"
    # Expired: a new request owns the key again.
    assert (await idem.claim_idempotency_key("acme", "k", "fp3", T0 + 3601, 60, 3600)).state is ClaimState.CLAIMED


async def test_a_released_or_lapsed_claim_can_be_taken_again(store: Store) -> None:
    idem = _idem(store)
    assert (await idem.claim_idempotency_key("t", "k", "fp", T0, 10, 3600)).state is ClaimState.CLAIMED
    await idem.release_idempotency_key("t", "k")
    assert (await idem.claim_idempotency_key("t", "k", "fp2", T0 + 1, 10, 3600)).state is ClaimState.CLAIMED
    # The owner died: after its lock lapses, the same request takes the key over; another request may not.
    assert (await idem.claim_idempotency_key("t", "k", "fp3", T0 + 20, 10, 3600)).state is ClaimState.IN_FLIGHT
    assert (await idem.claim_idempotency_key("t", "k", "fp2", T0 + 20, 10, 3600)).state is ClaimState.CLAIMED
    await idem.finish_idempotency_key("t", "k", 200, "application/json", b"{}")
    await idem.release_idempotency_key("t", "k")  # a finished record is not released
    assert (await idem.claim_idempotency_key("t", "k", "fp2", T0 + 21, 10, 3600)).state is ClaimState.DONE
    assert await idem.prune_idempotency_keys(T0 + 10_000, 100) == 1
    assert (await idem.claim_idempotency_key("t", "k", "fp9", T0 + 10_001, 10, 3600)).state is ClaimState.CLAIMED


async def test_queue_settings(store: Store) -> None:
    queues = _queues(store)
    assert await queues.list_queue_settings() == []
    await queues.set_queue_settings(QueueSettings("mail", paused=True, concurrency=None, updated_at=T0))
    await queues.set_queue_settings(QueueSettings("media", paused=False, concurrency=3, updated_at=T0))
    await queues.set_queue_settings(QueueSettings("mail", paused=False, concurrency=7, updated_at=T0 + 1))
    assert await queues.list_queue_settings() == [
        QueueSettings("mail", False, 7, T0 + 1),
        QueueSettings("media", False, 3, T0),
    ]


async def test_purging_the_dead_letter_deletes_only_dead_jobs(store: Store) -> None:
    dead_store = _dead(store)
    jobs = await enqueue(store, *[NewJob(task="t", tenant=t, max_attempts=1) for t in ("acme", "acme", "globex")])
    alive = (await enqueue(store, NewJob(task="alive", tenant="acme")))[0]
    running = await claim(store, T0, limit=3)
    assert {j.id for j in running} == {j.id for j in jobs}
    await store.fail_jobs([failure(j, T0, FailOutcome.DEAD) for j in running], T0)
    events = await dead_store.purge_dead_jobs(T0 + 1, 10, tenant="acme", ids=[jobs[0].id, alive.id])
    assert [(e.type, e.job_id) for e in events] == [(ev.DELETED, jobs[0].id)]
    assert await store.get_jobs([jobs[0].id]) == []
    assert (await get(store, alive.id)).state is JobState.QUEUED
    rest = await dead_store.purge_dead_jobs(T0 + 2, 10, tenant="acme")
    assert [e.job_id for e in rest] == [jobs[1].id]
    assert (await get(store, jobs[2].id)).state is JobState.DEAD  # another tenant's: untouched


async def test_event_bounds_follow_the_log(store: Store) -> None:
    if not isinstance(store, EventLogStore):
        pytest.skip("this store does not report event bounds")
    assert await store.event_bounds() == (0, 0)
    await enqueue(store, NewJob(task="t"), NewJob(task="t"), now=T0)
    await enqueue(store, NewJob(task="t"), now=T0 + 100)
    events = await store.list_events(0, 10)
    assert await store.event_bounds() == (events[0].id, events[-1].id)
    if not isinstance(store, EventPruneStore):
        return
    assert await store.prune_events(T0 + 50, 1) == 1
    assert await store.prune_events(T0 + 50, 10) == 1
    assert await store.event_bounds() == (events[2].id, events[2].id)
    assert [e.id for e in await store.list_events(0, 10)] == [events[2].id]


async def test_sessions_end_at_logout_and_when_their_key_is_revoked(store: Store) -> None:
    keys, sessions = _keys(store), _sessions(store)
    key = ApiKey("aaaaaaaaaaaa", "acme", "ci", ("jobs:read",), "h" * 64, T0)
    await keys.insert_api_key(key)
    first = SessionRecord("1" * 64, key.id, "acme", T0, T0 + 100)
    second = SessionRecord("2" * 64, key.id, "acme", T0 + 1, T0 + 101)
    other = SessionRecord("3" * 64, "bbbbbbbbbbbb", "acme", T0, T0 + 50)
    for s in (first, second, other):
        await sessions.insert_session(s)
    assert await sessions.get_session("1" * 64) == first and await sessions.get_session("9" * 64) is None
    assert first.active(T0 + 99) and not first.active(T0 + 100)
    await sessions.end_session("1" * 64, T0 + 5)
    await sessions.end_session("1" * 64, T0 + 6)  # the first end stays
    assert await sessions.get_session("1" * 64) == replace(first, ended_at=T0 + 5)
    await keys.revoke_api_key(key.id, T0 + 7)  # ends the key's other sessions, in the same transaction
    assert await sessions.get_session("2" * 64) == replace(second, ended_at=T0 + 7)
    assert await sessions.get_session("3" * 64) == other  # another key's: untouched
    assert await sessions.prune_sessions(T0 + 8, 10) == 2  # the two that ended
    assert await sessions.prune_sessions(T0 + 50, 10) == 1  # expired
    assert await sessions.get_session("3" * 64) is None
