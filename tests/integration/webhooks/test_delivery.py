"""Acceptance: a receiver that answers 503 for a while then 200 gets every event once it recovers, the
retries follow the schedule, and every request verifies with the ``standardwebhooks`` package."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import defaultdict
from collections.abc import Callable

from standardwebhooks.webhooks import Webhook

from jobengine.core.webhooks.model import ENDPOINT_DISABLED, FAILED, SUCCEEDED
from jobengine.engine import Engine
from jobengine.secretbox import new_key
from tests.integration.webhooks.conftest import MakeEngine, dispatching
from tests.support.waiting import until
from tests.support.webhook_receiver import Answer, Receiver


async def test_503_then_200_delivers_every_event_on_schedule_signed(
    make_engine: MakeEngine, receiver: Callable[[Answer], Receiver]
) -> None:
    recovered_at: list[float] = []

    def answer(n: int, r: object) -> tuple[int, dict[str, str]]:
        if n <= 9:  # three events x three failed attempts each, then healthy
            return 503, {}
        recovered_at.append(time.time())
        return 200, {}

    rx = receiver(answer)
    async with make_engine() as engine:
        endpoint = await engine.webhooks.create_endpoint("acme", rx.url, filter={"types": ["job.enqueued"]})
        async with dispatching(engine):
            jobs = [await engine.enqueue("t", {"n": i}, tenant="acme") for i in range(3)]
            await engine.enqueue("t", {"other": True}, tenant="globex")  # another tenant's: not delivered
            await until(lambda: len(rx.requests) >= 12)
            await asyncio.sleep(0.3)  # nothing more should come
        deliveries = await engine.webhooks.list_deliveries("acme", endpoint.id)

    assert len(rx.requests) == 12
    wh = Webhook(endpoint.secret)
    by_id: dict[str, list[float]] = defaultdict(list)
    delivered: list[str] = []
    for r, status in zip(rx.requests, [503] * 9 + [200] * 3, strict=True):
        payload = wh.verify(r.body, r.headers)  # raises unless the signature verifies
        by_id[r.headers["webhook-id"]].append(r.at)
        if status == 200:
            delivered.append(payload["data"]["job_id"])
    assert sorted(delivered) == sorted(j.id for j in jobs)  # every event, once
    assert len(by_id) == 3 and all(len(times) == 4 for times in by_id.values())
    for times in by_id.values():  # base 0.2 s, doubling, no jitter: 0.2, 0.4, 0.8
        gaps = [b - a for a, b in itertools.pairwise(times)]
        for gap, expected in zip(gaps, (0.2, 0.4, 0.8), strict=True):
            assert expected - 0.02 <= gap <= expected + 0.6, gaps
    assert {d.state for d in deliveries} == {SUCCEEDED} and len(deliveries) == 3


async def test_every_attempt_is_recorded_and_a_delivery_can_be_resent(
    make_engine: MakeEngine, receiver: Callable[[Answer], Receiver]
) -> None:
    rx = receiver(lambda n, r: (500, {}) if n == 1 else (200, {}))
    async with make_engine() as engine:
        endpoint = await engine.webhooks.create_endpoint("acme", rx.url)
        async with dispatching(engine):
            job = await engine.enqueue("t", None, tenant="acme")
            await until(lambda: len(rx.requests) >= 2)
            [delivery] = await engine.webhooks.list_deliveries("acme", endpoint.id)
            await until_state(engine, delivery.id, SUCCEEDED)
            attempts = await engine.webhooks.attempts(delivery.id, "acme")
            assert [a.status for a in attempts] == [500, 200]
            assert attempts[0].error == "HTTP 500" and attempts[1].error is None
            assert all(a.latency_ms > 0 for a in attempts)
            await engine.webhooks.resend(delivery.id, "acme")
            await until(lambda: len(rx.requests) >= 3)
            # Still dispatching: the receiver has the request before the dispatcher records its answer, and a
            # dispatcher stopped in between would leave the resent delivery unrecorded (it retries it later).
            await until_state(engine, delivery.id, SUCCEEDED)
        assert json.loads(rx.requests[2].body)["data"]["job_id"] == job.id
        assert rx.requests[2].headers["webhook-id"] == delivery.id  # the same id: receivers deduplicate
        assert len(await engine.webhooks.attempts(delivery.id, "acme")) == 3


async def until_state(engine: Engine, delivery_id: str, state: str) -> None:
    async with asyncio.timeout(5):
        while (await engine.webhooks.get_delivery(delivery_id, None)).state != state:  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def test_410_disables_the_endpoint_with_an_event_and_3xx_is_not_followed(
    make_engine: MakeEngine, receiver: Callable[[Answer], Receiver]
) -> None:
    target = receiver(lambda n, r: (200, {}))
    gone = receiver(lambda n, r: (410, {}))
    moved = receiver(lambda n, r: (302, {"location": target.url}))
    async with make_engine(webhook_retry_window=0.5) as engine:
        e_gone = await engine.webhooks.create_endpoint("acme", gone.url)
        e_moved = await engine.webhooks.create_endpoint("acme", moved.url, filter={"types": ["job.enqueued"]})
        async with dispatching(engine):
            await engine.enqueue("t", None, tenant="acme")
            await until(lambda: len(gone.requests) >= 1 and len(moved.requests) >= 2)
            async with asyncio.timeout(5):
                while (await engine.webhooks.get_endpoint(e_gone.id, "acme")).enabled:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
        assert not (await engine.webhooks.get_endpoint(e_gone.id, "acme")).enabled
        events = [e for e in await engine.events(0, 1000) if e.type == ENDPOINT_DISABLED]
        assert [e.data["endpoint_id"] for e in events if e.data["endpoint_id"] == e_gone.id] == [e_gone.id]
        assert "410" in str(events[0].data["reason"])
        assert len(gone.requests) == 1  # disabled: nothing more sent
        [d] = await engine.webhooks.list_deliveries("acme", e_moved.id)
        attempts = await engine.webhooks.attempts(d.id, "acme")
        assert attempts[0].status == 302 and "not followed" in (attempts[0].error or "")
    assert target.requests == []  # the redirect was never followed


async def test_retry_after_is_honoured_and_a_window_of_failures_disables(
    make_engine: MakeEngine, receiver: Callable[[Answer], Receiver]
) -> None:
    rx = receiver(lambda n, r: (429, {"retry-after": "1"}))
    async with make_engine(webhook_retry_window=1.5) as engine:
        endpoint = await engine.webhooks.create_endpoint("acme", rx.url, filter={"types": ["job.enqueued"]})
        async with dispatching(engine):
            await engine.enqueue("t", None, tenant="acme")
            await until(lambda: len(rx.requests) >= 2)
            [d] = await engine.webhooks.list_deliveries("acme", endpoint.id)
            await until_state(engine, d.id, FAILED)
            async with asyncio.timeout(5):  # the endpoint is disabled right after the delivery failed
                while (await engine.webhooks.get_endpoint(endpoint.id, "acme")).enabled:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
        gap = rx.requests[1].at - rx.requests[0].at
        assert gap >= 0.98  # Retry-After: 1, not the 0.2 s of the schedule
        # The delivery gave up after its window; the endpoint failed for the whole window: disabled.
        assert len(rx.requests) == 2
        stored = await engine.webhooks.get_endpoint(endpoint.id, "acme")
        assert not stored.enabled and "window" in (stored.disabled_reason or "")


async def test_delivery_on_postgresql(postgres_dsn: str, receiver: Callable[[Answer], Receiver]) -> None:
    rx = receiver(lambda n, r: (503, {}) if n == 1 else (200, {}))
    from tests.integration.webhooks.conftest import webhook_settings

    async with Engine.from_settings(webhook_settings(postgres_dsn, secret_keys=(new_key(),))) as engine:
        endpoint = await engine.webhooks.create_endpoint("acme", rx.url, filter={"types": ["job.enqueued"]})
        async with dispatching(engine):
            jobs = [await engine.enqueue("t", {"n": i}, tenant="acme") for i in range(2)]
            await until(lambda: len(rx.requests) >= 3)
            async with asyncio.timeout(5):
                while len(await engine.webhooks.list_deliveries("acme", endpoint.id, SUCCEEDED)) < 2:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
    wh = Webhook(endpoint.secret)
    delivered = {wh.verify(r.body, r.headers)["data"]["job_id"] for r in rx.requests}
    assert delivered == {j.id for j in jobs}


async def test_deliveries_survive_a_restart_and_the_jobs_deletion(
    make_engine: MakeEngine, receiver: Callable[[Answer], Receiver]
) -> None:
    """The receiver is down while the events happen; the process stops; retention deletes the job; a new
    process delivers the payload as it was when the event happened."""
    rx = receiver(lambda n, r: (200, {}))
    port = rx.port
    rx.close()  # nothing listens: every attempt is a connection error
    async with make_engine(stale_after=0.0, delete_after=0.0) as engine:
        endpoint = await engine.webhooks.create_endpoint(
            "acme", f"http://127.0.0.1:{port}/hook", filter={"types": ["job.enqueued"]}
        )
        async with dispatching(engine):
            job = await engine.enqueue("t", {"order": 7}, tenant="acme")
            async with asyncio.timeout(10):
                while not await engine.webhooks.list_deliveries("acme", endpoint.id):  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            [d] = await engine.webhooks.list_deliveries("acme", endpoint.id)
            async with asyncio.timeout(10):
                while (await engine.webhooks.get_delivery(d.id, "acme")).attempts < 1:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
        await engine.cancel(job.id, tenant="acme")
        await engine.prune()  # stale, then deleted (stale_after = delete_after = 0)
        await engine.prune()
        assert not await engine.list_jobs()
    again = Receiver(lambda n, r: (200, {}), port=port)
    try:
        async with make_engine() as engine, dispatching(engine):
            async with asyncio.timeout(15):
                while not again.requests:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            await until_state(engine, d.id, SUCCEEDED)
            attempts = await engine.webhooks.attempts(d.id, "acme")
        body = Webhook(endpoint.secret).verify(again.requests[0].body, again.requests[0].headers)
        assert body["data"]["job_id"] == job.id and body["data"]["type"] == "job.enqueued"
        assert attempts[0].status is None and attempts[0].error and attempts[-1].status == 200
    finally:
        again.close()


async def test_in_process_limiter_makes_deliveries_wait_not_drop(
    make_engine: MakeEngine, receiver: Callable[[Answer], Receiver]
) -> None:
    rx = receiver(lambda n, r: (200, {}))
    async with make_engine(webhook_rate_limiter="local") as engine:
        endpoint = await engine.webhooks.create_endpoint(
            "acme", rx.url, filter={"types": ["job.enqueued"]}, rate_limit=3, rate_window=0.5
        )
        async with dispatching(engine):
            await engine.enqueue_many([engine.new_job("t", {"i": i}, tenant="acme") for i in range(7)])
            await until(lambda: len(rx.requests) >= 7)
            await asyncio.sleep(0.2)
        deliveries = await engine.webhooks.list_deliveries("acme", endpoint.id)
    times = sorted(r.at for r in rx.requests)
    assert len(times) == 7 and len({r.headers["webhook-id"] for r in rx.requests}) == 7
    assert max(sum(1 for t in times if s <= t < s + 0.5) for s in times) <= 3
    assert times[-1] - times[0] >= 1.0  # 7 at 3 per 0.5 s: three windows at least
    assert all(d.state == SUCCEEDED and d.attempts == 1 for d in deliveries)  # waiting is not an attempt
