"""The webhook store port (jobengine.ports.webhooks) on every backend: endpoints (tenant-scoped), the
outbox fan-out (compare-and-set cursor, one delivery per endpoint and event), claims under a lease token,
fenced attempts and postpones, resend, disabling with an event, inbound hooks named per tenant and the ids of
their events (a replay window), deletes that cascade, secrets that round-trip through the seal."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from jobengine.core.mapping import TriggerMapping
from jobengine.core.webhooks.model import (
    ENDPOINT_DISABLED,
    FAILED,
    PENDING,
    SUCCEEDED,
    Attempt,
    Delivery,
    Endpoint,
    EventFilter,
    InboundHook,
)
from jobengine.ports.store import Store
from jobengine.ports.webhooks import WebhookStore
from jobengine.secretbox import new_key
from jobengine.settings import Settings

from .helpers import T0

KEYS = (new_key(), new_key())


@pytest.fixture
async def hooks(store: Store) -> AsyncIterator[WebhookStore]:
    ws = store.webhook_store(Settings(secret_keys=KEYS[:1]))
    assert isinstance(ws, WebhookStore)
    try:
        yield ws
    finally:
        await ws.close()


def endpoint(eid: str, tenant: str = "acme", **kw: object) -> Endpoint:
    base = Endpoint(eid, tenant, f"https://example.com/{eid}", "whsec_" + "A" * 44,
                    EventFilter(("job.*",), ("q",), ()), created_at=T0, updated_at=T0)  # fmt: skip
    return replace(base, **kw)  # type: ignore[arg-type]


def delivery(did: str, eid: str, event_id: int, tenant: str = "acme", at: float = T0) -> Delivery:
    return Delivery(did, tenant, eid, event_id, "job.enqueued", '{"x":1}', PENDING, next_at=at, window_start=at,
                    created_at=at, updated_at=at)  # fmt: skip


async def test_endpoints_are_tenant_scoped_and_round_trip(hooks: WebhookStore) -> None:
    e = endpoint("we_1", rate_limit=5, rate_window=1.5, description="d", previous_secret="whsec_x",
                 previous_until=T0 + 9)  # fmt: skip
    await hooks.insert_endpoint(e)
    await hooks.insert_endpoint(endpoint("we_2", "globex", created_at=T0 + 1))
    assert await hooks.get_endpoint("we_1", "acme") == e
    assert await hooks.get_endpoint("we_1", "globex") is None
    assert [x.id for x in await hooks.list_endpoints("acme")] == ["we_1"]
    assert [x.id for x in await hooks.list_endpoints(None)] == ["we_1", "we_2"]
    changed = replace(e, url="https://example.com/new", filter=EventFilter((), (), ("t",)), enabled=False)
    await hooks.save_endpoint(changed)
    assert await hooks.get_endpoint("we_1") == changed
    await hooks.mark_endpoint("we_1", False, T0 + 5)
    await hooks.mark_endpoint("we_1", False, T0 + 6)  # the first failure's time stays
    assert (await hooks.get_endpoint("we_1")).failing_since == T0 + 5  # type: ignore[union-attr]
    await hooks.mark_endpoint("we_1", True, T0 + 7)
    assert (await hooks.get_endpoint("we_1")).failing_since is None  # type: ignore[union-attr]
    assert not await hooks.delete_endpoint("we_1", "globex")
    assert await hooks.delete_endpoint("we_1", "acme")
    assert await hooks.get_endpoint("we_1") is None


async def test_fan_out_is_compare_and_set_and_deduplicated(hooks: WebhookStore) -> None:
    await hooks.insert_endpoint(endpoint("we_1"))
    assert await hooks.get_cursor("c") is None
    await hooks.init_cursor("c", 7)
    await hooks.init_cursor("c", 99)  # exists: unchanged
    assert await hooks.get_cursor("c") == 7
    assert await hooks.fan_out("c", 7, 9, [delivery("wd_1", "we_1", 8), delivery("wd_2", "we_1", 9)])
    assert not await hooks.fan_out("c", 7, 10, [delivery("wd_3", "we_1", 10)])  # lost the race: nothing
    assert await hooks.get_cursor("c") == 9
    assert await hooks.fan_out("c", 9, 10, [delivery("wd_4", "we_1", 9)])  # (endpoint, event) again: ignored
    assert sorted(d.id for d in await hooks.list_deliveries("acme")) == ["wd_1", "wd_2"]
    assert await hooks.get_delivery("wd_1", "globex") is None


async def test_claims_are_leased_and_attempts_fenced(hooks: WebhookStore) -> None:
    await hooks.insert_endpoint(endpoint("we_1"))
    await hooks.insert_endpoint(endpoint("we_off", enabled=False))
    await hooks.init_cursor("c", 0)
    batch = [delivery("wd_1", "we_1", 1, at=T0), delivery("wd_2", "we_1", 2, at=T0 + 1),
             delivery("wd_3", "we_1", 3, at=T0 + 100), delivery("wd_4", "we_off", 1)]  # fmt: skip
    assert await hooks.fan_out("c", 0, 3, batch)
    first = await hooks.claim_deliveries(T0 + 2, 10, 30.0, "tok-a")
    assert [d.id for d in first] == ["wd_1", "wd_2"]  # due, of enabled endpoints, earliest first
    assert all(d.lease_token == "tok-a" for d in first)
    assert await hooks.claim_deliveries(T0 + 3, 10, 30.0, "tok-b") == []  # leased
    # Leases lapse: two claimers at once take the lapsed and the newly due ones, never the same one twice.
    both = await asyncio.gather(*(hooks.claim_deliveries(T0 + 200, 10, 30.0, t) for t in ("x", "y")))
    ids = [d.id for b in both for d in b]
    assert sorted(ids) == ["wd_1", "wd_2", "wd_3"]
    holder = {d.id: d for b in both for d in b}
    d1 = first[0]  # still tok-a's view: the lease moved on, so its result is refused
    assert not await hooks.finish_attempt(replace(d1, state=SUCCEEDED), Attempt(d1.id, 1, "acme", T0 + 2, 200, 1.5))
    d1 = holder["wd_1"]
    done = replace(d1, state=FAILED, attempts=1, series_attempts=1, last_status=503, last_error="HTTP 503",
                   updated_at=T0 + 201)  # fmt: skip
    assert await hooks.finish_attempt(done, Attempt(d1.id, 1, "acme", T0 + 201, 503, 1.5, "HTTP 503"))
    assert not await hooks.finish_attempt(done, Attempt(d1.id, 2, "acme", T0 + 201, 503, 1.5))  # lease gone
    stored = await hooks.get_delivery(d1.id, "acme")
    assert stored is not None and stored.state == FAILED and stored.lease_token is None and stored.attempts == 1
    assert [(a.attempt, a.status, a.error) for a in await hooks.list_attempts(d1.id)] == [(1, 503, "HTTP 503")]
    token2 = holder["wd_2"].lease_token
    assert token2 is not None and not await hooks.postpone("wd_2", "tok-a", T0 + 250)
    assert await hooks.postpone("wd_2", token2, T0 + 250)
    assert not await hooks.postpone("wd_2", token2, T0 + 260)  # given back: the token holds nothing now
    assert (await hooks.get_delivery("wd_2")).next_at == T0 + 250  # type: ignore[union-attr]
    again = await hooks.resend(d1.id, "acme", T0 + 10)
    assert again is not None and again.state == PENDING and again.series_attempts == 0 and again.attempts == 1
    assert await hooks.resend(d1.id, "globex", T0 + 10) is None
    assert [d.state for d in await hooks.list_deliveries("acme", "we_1", PENDING)].count(PENDING) == 3
    assert await hooks.delete_endpoint("we_1", "acme")
    assert await hooks.list_deliveries("acme", "we_1") == [] and await hooks.list_attempts(d1.id) == []


async def test_disable_appends_one_event(hooks: WebhookStore, store: Store) -> None:
    await hooks.insert_endpoint(endpoint("we_1"))
    event = await hooks.disable_endpoint("we_1", "gone", T0 + 1)
    assert event is not None and event.type == ENDPOINT_DISABLED and event.tenant == "acme"
    assert event.data == {"endpoint_id": "we_1", "url": "https://example.com/we_1", "reason": "gone"}
    assert await hooks.disable_endpoint("we_1", "again", T0 + 2) is None
    stored = await hooks.get_endpoint("we_1")
    assert stored is not None and not stored.enabled and stored.disabled_reason == "gone"
    logged = [e for e in await store.list_events(0, 100) if e.type == ENDPOINT_DISABLED]
    assert [(e.id, dict(e.data)) for e in logged] == [(event.id, dict(event.data))]


async def test_inbound_hooks_are_named_per_tenant(hooks: WebhookStore) -> None:
    template = TriggerMapping((("ref", "/ref"),), "/files")
    hook = InboundHook("deploys", "acme", "sch_1", "s" * 32, True, T0, template)
    other = InboundHook("deploys", "globex", "sch_2", "t" * 32, True, T0 + 1)
    assert await hooks.insert_inbound(hook)
    assert not await hooks.insert_inbound(replace(hook, schedule="sch_3"))  # the tenant has that name already
    assert await hooks.insert_inbound(other)  # another tenant may use it
    assert await hooks.get_inbound("deploys", "acme") == hook
    assert await hooks.get_inbound("deploys", "globex") == other
    assert await hooks.inbound_named("deploys") == [hook, other]
    assert await hooks.list_inbound("acme") == [hook] and await hooks.list_inbound("nobody") == []
    assert not await hooks.delete_inbound("deploys", "nobody")
    assert await hooks.delete_inbound("deploys", "acme")
    assert await hooks.get_inbound("deploys", "acme") is None
    assert await hooks.inbound_named("deploys") == [other]


async def test_an_inbound_event_id_is_claimed_once_per_window(hooks: WebhookStore) -> None:
    assert await hooks.claim_inbound_event("acme", "deploys", "msg_1", T0, 60.0)
    assert not await hooks.claim_inbound_event("acme", "deploys", "msg_1", T0 + 59, 60.0)  # a replay
    assert await hooks.claim_inbound_event("globex", "deploys", "msg_1", T0 + 1, 60.0)  # another tenant's hook
    assert await hooks.claim_inbound_event("acme", "builds", "msg_1", T0 + 1, 60.0)  # another hook
    assert await hooks.claim_inbound_event("acme", "deploys", "msg_1", T0 + 60, 60.0)  # past the window
    await hooks.release_inbound_event("acme", "deploys", "msg_1")
    assert await hooks.claim_inbound_event("acme", "deploys", "msg_1", T0 + 61, 60.0)  # released: taken again
    assert await hooks.prune_inbound_events(T0 + 1, 100) == 2  # received at T0 and T0 + 1
    assert not await hooks.claim_inbound_event("acme", "deploys", "msg_1", T0 + 62, 60.0)  # kept


async def test_secrets_round_trip_and_reseal_keeps_a_concurrent_rotation(hooks: WebhookStore) -> None:
    e = endpoint("we_1", previous_secret="whsec_" + "B" * 44, previous_until=T0 + 9)
    await hooks.insert_endpoint(e)
    await hooks.insert_inbound(InboundHook("deploys", "acme", "sch_1", "s" * 32, True, T0))
    assert await hooks.get_endpoint("we_1") == e
    assert (await hooks.get_inbound("deploys", "acme")).secret == "s" * 32  # type: ignore[union-attr]
    assert await hooks.count_stale_secrets() == 0
    assert await hooks.reseal_secrets() == 0
