"""Acceptance: the Redis limiter at 10 per second shared by 3 processes sending to one endpoint: no
1-second window carries more than 10 deliveries at the receiver, and nothing is dropped. Also: the limiter
itself (atomic, shared, waits instead of dropping) and the start-up failure without a reachable Redis."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jobengine.backends.redis.ratelimit import RedisLimiter
from jobengine.engine import Engine
from jobengine.errors import ConfigError
from jobengine.webhooks.dispatcher import WebhookDispatcher
from jobengine.webhooks.limiter import LocalLimiter, NoopLimiter
from tests.integration.webhooks.conftest import webhook_settings
from tests.support.webhook_receiver import Answer, Receiver

ROOT = Path(__file__).resolve().parents[3]
N = 30


@pytest.mark.slow
@pytest.mark.serial
async def test_redis_limiter_shared_by_three_processes(
    tmp_path: Path, redis_url: str, receiver: Callable[[Answer], Receiver]
) -> None:
    rx = receiver(lambda n, r: (200, {}))
    database = str(tmp_path / "shared.db")
    async with Engine.from_settings(webhook_settings(database)) as engine:
        endpoint = await engine.webhooks.create_endpoint(
            "acme", rx.url, filter={"types": ["job.enqueued"]}, rate_limit=10, rate_window=1.0
        )
        for i in range(N):
            await engine.enqueue("t", {"i": i}, tenant="acme")
    env = {**os.environ, "JOBENGINE_WEBHOOK_RATE_LIMITER": "redis", "JOBENGINE_WEBHOOK_REDIS_URL": redis_url,
           "JOBENGINE_WEBHOOK_ALLOW_HOSTS": "127.0.0.1/32", "JOBENGINE_WEBHOOK_POLL_INTERVAL": "0.05",
           "JOBENGINE_WEBHOOK_RETRY_BASE": "0.2",
           # The limiter counts 1.2 s windows: 2 shared cores can stall a sender or the receiver between the
           # count and the arrival by ~0.1 s, which would show as 11 in a 1 s window at the receiver.
           "JOBENGINE_WEBHOOK_RATE_MARGIN": "0.2", "PYTHONPATH": str(ROOT)}  # fmt: skip
    logs = [(tmp_path / f"dispatcher{i}.log").open("wb") for i in range(3)]
    procs = [
        subprocess.Popen(  # noqa: ASYNC220 (starting a process does not block for long)
            [sys.executable, "-m", "tests.support.webhook_dispatcher_proc", database, "30"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for log in logs
    ]
    try:
        async with asyncio.timeout(40):
            while len({r.headers["webhook-id"] for r in rx.requests}) < N:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # anything extra would arrive now
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for log in logs:
            log.close()
    times = sorted(r.at for r in rx.requests)
    ids = [r.headers["webhook-id"] for r in rx.requests]
    assert len(ids) == N and len(set(ids)) == N  # every delivery once: nothing dropped, nothing doubled
    busiest = max(sum(1 for t in times if start <= t < start + 1.0) for start in times)
    assert busiest <= 10, f"{busiest}: {' '.join(f'{t - times[0]:.3f}' for t in times)}"
    assert times[-1] - times[0] >= (N / 10 - 1) * 0.99  # N at 10/s cannot take less than N/10 - 1 s
    async with Engine.from_settings(webhook_settings(database)) as engine:
        deliveries = await engine.webhooks.list_deliveries("acme", endpoint.id, limit=1000)
        assert len(deliveries) == N and {d.state for d in deliveries} == {"succeeded"}
        assert all(d.attempts == 1 for d in deliveries)  # rate limited: waited, never counted as an attempt


async def test_redis_limiter_is_shared_and_waits(redis_url: str) -> None:
    a, b = RedisLimiter(redis_url), RedisLimiter(redis_url)
    try:
        await a.check()
        results = await asyncio.gather(*(lim.acquire("k", 5, 1.0) for lim in (a, b) for _ in range(5)))
        assert sum(r == 0 for r in results) == 5  # 5 counted across both, 5 told to wait
        assert all(0 < r <= 1.0 for r in results if r)
        assert await a.acquire("other", 5, 1.0) == 0  # keys are separate
    finally:
        await a.close()
        await b.close()


async def test_local_and_noop_limiters() -> None:
    now = [100.0]
    local = LocalLimiter(clock=lambda: now[0])
    assert [await local.acquire("k", 2, 10.0) for _ in range(3)] == [0.0, 0.0, 10.0]
    now[0] += 10.0
    assert await local.acquire("k", 2, 10.0) == 0.0
    assert all([await NoopLimiter().acquire("k", 1, 1.0) == 0.0 for _ in range(5)])


async def test_redis_limiter_without_redis_fails_at_start_up(tmp_path: Path) -> None:
    settings = webhook_settings(str(tmp_path / "x.db"), webhook_rate_limiter="redis",
                                webhook_redis_url="redis://127.0.0.1:1/0")  # fmt: skip
    async with Engine.from_settings(settings) as engine:
        dispatcher = WebhookDispatcher(engine)
        started = time.monotonic()
        with pytest.raises(ConfigError, match=r"webhook_redis_url: the redis rate limiter cannot reach"):
            await dispatcher.start()
        assert not dispatcher.running and time.monotonic() - started < 10
    with pytest.raises(ConfigError, match="webhook_redis_url"):
        webhook_settings(str(tmp_path / "y.db"), webhook_rate_limiter="redis")
