"""The engine over each transport: jobs enqueued through the store (and its outbox, for a broker) are run by
an unchanged worker, exactly once, with the store and the dead-letter stream agreeing. Same bodies on
database (SQLite, PostgreSQL), Redis and NATS (both brokers with a SQLite store)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from jobengine.core import codec
from jobengine.core.queue_config import NatsConfig, NatsQueue, QueueConfig, RedisConfig, RedisQueue
from jobengine.core.retry import RetryPolicy
from jobengine.core.states import JobState
from jobengine.delivery.relay import OutboxRelay, message_of
from jobengine.delivery.transports import outbox_headers
from jobengine.engine import Engine
from jobengine.ports.outbox import OutboxStore
from jobengine.ports.transport import (
    DELIVERIES_HEADER,
    FAILURE_REASON_HEADER,
    RUN_ID_HEADER,
    SCHEDULE_ID_HEADER,
    Message,
)
from jobengine.settings import Settings
from support.services import drop_nats_streams, unique_name

from .conftest import KINDS, depth_settles_at

FIXTURES = Path(__file__).parents[2] / "unit" / "fixtures" / "codec"

EngineFactory = Callable[..., Awaitable[Engine]]


@pytest.fixture(params=KINDS)
async def make_engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EngineFactory]:
    kind: str = request.param
    name = unique_name("te")
    engines: list[Engine] = []
    streams: list[str] = []
    nats_url = request.getfixturevalue("nats_url") if kind == "nats" else ""
    redis_url = request.getfixturevalue("redis_url") if kind == "redis" else ""
    dsn = request.getfixturevalue("postgres_contract_dsn") if kind == "database-postgres" else ""

    async def make(*, max_deliveries: int = 3, dead_letter: bool = True, lease: float = 5.0) -> Engine:
        queue = QueueConfig(
            kind=kind.split("-")[0], max_delivery_attempts=max_deliveries, dead_letter_enabled=dead_letter
        )
        database: str = str(tmp_path / f"{name}.db")
        extra: dict[str, Any] = {}
        if kind == "database-postgres":
            database, extra = dsn, {"postgres_schema": name, "postgres_pool_size": 4}
        elif kind == "redis":
            queues = {
                q: RedisQueue(f"{name}:{q}", f"{name}-{q}", f"{name}:{q}:dead", f"{name}:{q}:idem:")
                for q in ("planner", "runner")
            }
            queue = QueueConfig(kind="redis", max_delivery_attempts=max_deliveries, dead_letter_enabled=dead_letter,
                                redis=RedisConfig(redis_url, **queues))  # fmt: skip
        elif kind == "nats":
            queues_n = {
                q: NatsQueue(f"{name}_{q}", f"{name}.{q}", f"{name}-{q}", f"{name}_{q}_D", f"{name}.{q}.d")
                for q in ("planner", "runner")
            }
            streams.extend(s for q in queues_n.values() for s in (q.stream, q.dead_letter_stream))
            queue = QueueConfig(kind="nats", max_delivery_attempts=max_deliveries, dead_letter_enabled=dead_letter,
                                nats=NatsConfig(nats_url, **queues_n))  # fmt: skip
        settings = Settings(database=database, queue=queue, lease_seconds=lease, rescue_interval=0.5, **extra)
        engine = Engine.from_settings(settings)
        engines.append(engine)
        return engine

    try:
        yield make
    finally:
        for engine in engines:
            if kind == "database-postgres":
                drop = getattr(engine.store, "drop_schema", None)
                if drop is not None:
                    await drop()
            # A second close (the test's own ``async with`` closed it) fails once enqueue_sync made the
            # engine's private loop: Engine.close() is not idempotent there (reported; not this suite's).
            with contextlib.suppress(RuntimeError):
                await engine.close()
        if streams:
            await drop_nats_streams(nats_url, streams)


@asynccontextmanager
async def worker(engine: Engine, **options: Any) -> AsyncIterator[None]:
    options.setdefault("concurrency", 20)
    options.setdefault("poll_interval", 0.2)
    w = engine.worker(**options)
    task = asyncio.create_task(w.run())
    try:
        yield
    finally:
        w.stop()
        await asyncio.wait_for(task, 20)


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def states(engine: Engine) -> dict[JobState, int]:
    out: dict[JobState, int] = {}
    for (_, state), n in (await engine.count_jobs()).items():
        out[state] = out.get(state, 0) + n
    return out


async def test_every_job_runs_exactly_once_and_is_counted(make_engine: EngineFactory) -> None:
    engine = await make_engine()
    runs: list[int] = []

    @engine.task()
    async def work(ctx: Any) -> None:
        runs.append(ctx.payload["i"])

    async with engine:
        await engine.enqueue_many([engine.new_job("work", {"i": i}) for i in range(150)])
        async with worker(engine):
            await until(lambda: _settled(engine, 150))
        assert sorted(runs) == list(range(150))
        assert await states(engine) == {JobState.SUCCEEDED: 150}
        runner = engine.transports.runner
        assert await depth_settles_at(runner, 0) == 0
        if runner.capabilities.broker:
            metrics, kind = engine.transports.metrics, runner.capabilities.name
            assert metrics.value(kind, "runner", "enqueued") == 150
            assert metrics.value(kind, "runner", "acked") == 150
            await engine.transports.refresh_metrics()
            assert metrics.depth.labels(kind, "runner")._value.get() == 0
        assert all(h.ok for h in await engine.transports.health())


async def _settled(engine: Engine, n: int) -> bool:
    done = await states(engine)
    return sum(done.get(s, 0) for s in (JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED)) >= n


async def test_payloads_are_dequeued_and_reserialised_byte_for_byte(make_engine: EngineFactory) -> None:
    engine = await make_engine()
    seen: dict[str, bytes] = {}

    @engine.task()
    async def echo(ctx: Any) -> None:
        seen[ctx.payload["name"]] = codec.dumpb(ctx.payload["value"])

    samples = sorted(p for p in FIXTURES.glob("*.json") if not p.name.endswith(".expected.json"))
    async with engine:
        for sample in samples:
            await engine.enqueue("echo", {"name": sample.stem, "value": codec.loads(sample.read_bytes())})
        async with worker(engine):
            await until(lambda: _settled(engine, len(samples)))
    for sample in samples:
        assert seen[sample.stem] == (FIXTURES / f"{sample.stem}.expected.json").read_bytes(), sample.name


async def test_a_poison_job_is_dead_lettered_after_exactly_max_deliveries(make_engine: EngineFactory) -> None:
    engine = await make_engine(max_deliveries=3)
    runs: list[int] = []
    broker = engine.transports.runner.capabilities.broker

    # Over a broker its maxDeliveryAttempts decides (the job would allow 10); on the database, the job's own.
    @engine.task(max_attempts=10 if broker else 3, retry=RetryPolicy(base=0.05, jitter=False))
    async def poison(ctx: Any) -> None:
        runs.append(ctx.job.attempt)
        raise ValueError("poison")

    async with engine:
        job = await _enqueue_with_run(engine, "poison")
        async with worker(engine):
            await until(lambda: _settled(engine, 1))
            await until(lambda: _has_dead_letter(engine))
        assert runs == [1, 2, 3]
        assert (await engine.get_job(job)).state is JobState.DEAD
        (dead,) = await engine.transports.runner.dead_letters()
        assert dead.message.id == job
        assert dead.headers[DELIVERIES_HEADER] == "3"
        assert dead.headers[FAILURE_REASON_HEADER]
        assert RUN_ID_HEADER in dead.headers and SCHEDULE_ID_HEADER in dead.headers
        if engine.transports.runner.capabilities.message_headers:
            assert (dead.headers[RUN_ID_HEADER], dead.headers[SCHEDULE_ID_HEADER]) == ("run-42", "sch-7")
        assert await depth_settles_at(engine.transports.runner, 0) == 0


async def _enqueue_with_run(engine: Engine, task: str) -> str:
    """Enqueue one job that belongs to a run (a broker's message carries the run and schedule ids)."""
    new = engine.new_job(task, {"x": 1})
    if engine.settings.queue.broker:
        headers = {new.id: outbox_headers("run-42", "sch-7")}
        await engine.transports.enqueue([new], engine.clock.now(), [()], headers=headers)
    else:
        await engine.enqueue_many([new])
    return new.id


async def _has_dead_letter(engine: Engine) -> bool:
    return bool(await engine.transports.runner.dead_letters())


async def test_with_dead_lettering_off_a_poison_job_is_dropped_and_counted(make_engine: EngineFactory) -> None:
    engine = await make_engine(max_deliveries=2, dead_letter=False)
    runner = engine.transports.runner
    runs: list[int] = []

    @engine.task(max_attempts=10 if runner.capabilities.broker else 2, retry=RetryPolicy(base=0.05, jitter=False))
    async def poison(ctx: Any) -> None:
        runs.append(ctx.job.attempt)
        raise ValueError("poison")

    async with engine:
        job = (await engine.enqueue("poison")).id
        async with worker(engine):
            await until(lambda: _settled(engine, 1))
            if runner.capabilities.dead_letter_stream:
                await until(lambda: _count(engine, "dropped", 1))
        assert runs == [1, 2]
        assert (await engine.get_job(job)).state is JobState.DEAD  # the store keeps it, dead
        if runner.capabilities.dead_letter_stream:
            assert await runner.dead_letters() == []
            assert engine.transports.metrics.value(runner.capabilities.name, "runner", "dropped") == 1
        assert await depth_settles_at(runner, 0) == 0


async def _count(engine: Engine, what: str, n: int) -> bool:
    runner = engine.transports.runner
    return engine.transports.metrics.value(runner.capabilities.name, "runner", what) >= n


async def test_retries_dependents_and_delays_reach_the_worker(make_engine: EngineFactory) -> None:
    engine = await make_engine()
    runs: list[str] = []
    flaky_failures = 2

    @engine.task(max_attempts=5, retry=RetryPolicy(base=0.05, jitter=False))
    async def flaky(ctx: Any) -> None:
        nonlocal flaky_failures
        runs.append("flaky")
        if flaky_failures:
            flaky_failures -= 1
            raise RuntimeError("not yet")

    @engine.task()
    async def step(ctx: Any) -> None:
        runs.append(ctx.payload["name"])

    async with engine:
        parent = await engine.enqueue("step", {"name": "parent"})
        await engine.enqueue("step", {"name": "child"}, depends_on=[parent.id])
        later = await engine.enqueue("step", {"name": "later"}, delay=1.0)
        await engine.enqueue("flaky")
        async with worker(engine):
            await until(lambda: _settled(engine, 4))
        assert runs.count("flaky") == 3
        assert runs.index("parent") < runs.index("child")
        done = await engine.get_job(later.id)
        assert done.started_at is not None and done.started_at >= later.run_at
        assert await states(engine) == {JobState.SUCCEEDED: 4}


async def test_a_job_longer_than_its_lease_runs_once(make_engine: EngineFactory) -> None:
    """Heartbeats extend the store's lease and the broker's, so the message is not delivered again."""
    engine = await make_engine(lease=0.6)
    runs: list[int] = []

    @engine.task()
    async def slow(ctx: Any) -> None:
        runs.append(1)
        await asyncio.sleep(1.5)

    async with engine:
        await engine.enqueue("slow")
        async with worker(engine, lease_seconds=0.6, heartbeat_every=0.15):
            await until(lambda: _settled(engine, 1))
            await asyncio.sleep(0.7)  # past another lease: no delivery comes back
        assert runs == [1]


async def test_duplicate_messages_and_a_relay_crash_start_the_job_once(make_engine: EngineFactory) -> None:
    """The relay publishes, then "crashes" before deleting its rows: the rows are published again after the
    hold; copies past the broker's de-duplication (other keys) reach workers and claim nothing."""
    engine = await make_engine()
    runner = engine.transports.runner
    if not runner.capabilities.broker:
        pytest.skip("the database transport has no outbox: the job row is its own message")
    runs: list[int] = []

    @engine.task()
    async def once(ctx: Any) -> None:
        runs.append(1)

    async with engine:
        relay = engine.transports.relay
        assert relay is not None
        await relay.stop()  # this test plays the relay
        job = await engine.enqueue("once")
        store = engine.store
        assert isinstance(store, OutboxStore)
        rows = await store.claim_outbox(engine.clock.now(), 10, 0.2)
        assert [r.job_id for r in rows] == [job.id]
        assert await runner.publish([message_of(r) for r in rows]) == [True]
        # crash: the rows are never deleted; after the hold another relay takes them
        await asyncio.sleep(0.3)
        again = OutboxRelay(store, runner, engine.clock, None)
        assert await again.run_once() == 1
        await again.flush()  # its deletes are batched
        assert await store.claim_outbox(engine.clock.now() + 60, 10, 1.0) == []
        await runner.publish([Message(job.id, job.queue, key=f"copy-{i}") for i in range(3)])
        # the first publish and three copies; the re-publish was swallowed by the key
        assert await depth_settles_at(runner, 4) == 4
        async with worker(engine):
            await until(lambda: _settled(engine, 1))
            await until(lambda: _depth_is(engine, 0))
        assert runs == [1]
        assert (await engine.get_job(job.id)).attempt == 1


async def test_a_job_replayed_while_its_death_is_reported_runs_again(make_engine: EngineFactory) -> None:
    """A dead job replayed at once: its new message reaches the worker while that worker still reports the
    attempt that died (the store has the outcome, the broker not yet). The new message is the job's next
    run, not a copy of the one the dead attempt holds; that one, not the new one, is dead-lettered."""
    engine = await make_engine()
    calls: list[int] = []

    @engine.task(max_attempts=1)
    async def flaky(ctx: Any) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("first time")
        return "ok"

    async with engine:
        job = await engine.enqueue("flaky", max_attempts=1)
        report = engine.transitions.fail_jobs
        picked: list[bool] = []

        async def fail_then_replay(failures: Any) -> Any:
            # The store records the death; the replay and the worker's next fetch come before the rest of
            # the report (the broker's side), in that order, every time.
            changed = await report(failures)
            if not picked and any(j.id == job.id and j.state is JobState.DEAD for j in changed.jobs):
                await engine.replay(job.id)
                picked.append(await _eventually(lambda: _left_queued(engine, job.id), 30.0))
            return changed

        engine.transitions.fail_jobs = fail_then_replay  # type: ignore[method-assign]
        async with worker(engine):
            await until(lambda: _true(bool(picked)))
            assert picked == [True], "the replayed job's message was taken for a copy and never claimed"
            await until(lambda: _state_is(engine, job.id, JobState.SUCCEEDED))
            done = await engine.get_job(job.id)
            assert (done.result, len(calls)) == ("ok", 2)
            runner = engine.transports.runner
            if runner.capabilities.dead_letter_stream:
                await until(lambda: _has_dead_letter(engine))
                (dead,) = await runner.dead_letters()
                assert (dead.message.id, dead.message.key) == (job.id, job.id)  # the first publish's message
            assert await depth_settles_at(runner, 0) == 0


async def _eventually(check: Callable[[], Awaitable[bool]], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def _left_queued(engine: Engine, job_id: str) -> bool:
    return (await engine.get_job(job_id)).state is not JobState.QUEUED


async def _state_is(engine: Engine, job_id: str, state: JobState) -> bool:
    return (await engine.get_job(job_id)).state is state


async def _true(value: bool) -> bool:
    return value


async def _depth_is(engine: Engine, n: int) -> bool:
    return await engine.transports.runner.depth() == n


async def test_enqueue_sync_from_another_thread_is_delivered(make_engine: EngineFactory) -> None:
    """``enqueue_sync`` runs on the engine's private loop in another thread; the relay lives on this one."""
    engine = await make_engine()
    runs: list[int] = []

    @engine.task()
    async def work(ctx: Any) -> None:
        runs.append(ctx.payload["i"])

    async with engine:
        async with worker(engine):
            for i in range(3):
                await asyncio.to_thread(engine.enqueue_sync, "work", {"i": i})
            await until(lambda: _settled(engine, 3))
        assert sorted(runs) == [0, 1, 2]


# -- flow limits: claims by id honour them as database claims do -----------------------------------------
# ``max_deliveries=2``: a job held back by its queue's limits waits without counting deliveries (kept by the
# source, its broker lease extended: the waits here outlast the lease), so none may reach a dead letter.


async def _no_retries_or_dead_letters(engine: Engine) -> None:
    runner = engine.transports.runner
    assert all(j.state is JobState.SUCCEEDED for j in await engine.list_jobs())
    if runner.capabilities.broker:
        kind = runner.capabilities.name
        assert engine.transports.metrics.value(kind, "runner", "retried") == 0
        assert engine.transports.metrics.value(kind, "runner", "dead_lettered") == 0
        assert engine.transports.metrics.value(kind, "runner", "lease_expired") == 0  # kept ones were extended
        assert await runner.dead_letters() == []
    assert await depth_settles_at(runner, 0) == 0


async def test_a_queue_cap_holds_and_every_job_runs_once(make_engine: EngineFactory) -> None:
    # The last jobs wait 5 rounds of 0.6 s, twice the 1.5 s broker lease, which only extensions keep (a lease
    # of 1 s, 0.8 s of slack, expired on a loaded machine).
    engine = await make_engine(max_deliveries=2, lease=1.5)
    running, peak, runs = 0, 0, collections.Counter[int]()

    @engine.task(queue="capped")
    async def slow(ctx: Any) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        runs[ctx.payload["i"]] += 1
        try:
            await asyncio.sleep(0.6)
        finally:
            running -= 1

    async with engine:
        await engine.queues.update("capped", concurrency=2)
        await engine.enqueue_many([engine.new_job("slow", {"i": i}) for i in range(10)])
        async with worker(engine, concurrency=10, lease_seconds=1.5, heartbeat_every=0.2):
            await until(lambda: _settled(engine, 10), timeout=60)
        assert peak == 2  # never more, and the cap (not the worker) is what held the jobs back
        assert runs == {i: 1 for i in range(10)}
        await _no_retries_or_dead_letters(engine)


async def test_a_key_concurrency_limit_holds(make_engine: EngineFactory) -> None:
    engine = await make_engine(max_deliveries=2)
    running: collections.Counter[str] = collections.Counter()
    peak: collections.Counter[str] = collections.Counter()

    @engine.task(queue="keyed")
    async def slow(ctx: Any) -> None:
        account = ctx.payload["account"]
        running[account] += 1
        peak[account] = max(peak[account], running[account])
        try:
            await asyncio.sleep(0.2)
        finally:
            running[account] -= 1

    async with engine:
        await engine.flow.set_limits("keyed", concurrency=1, concurrency_key="payload.account")
        await engine.enqueue_many([engine.new_job("slow", {"account": "ab"[i % 2]}) for i in range(8)])
        async with worker(engine, concurrency=8):
            await until(lambda: _settled(engine, 8), timeout=60)
        assert peak == {"a": 1, "b": 1}
        await _no_retries_or_dead_letters(engine)


@pytest.mark.serial
async def test_a_rate_limit_spreads_the_starts(make_engine: EngineFactory) -> None:
    engine = await make_engine(max_deliveries=2)
    runs: collections.Counter[int] = collections.Counter()

    @engine.task(queue="rated")
    async def quick(ctx: Any) -> None:
        runs[ctx.payload["i"]] += 1

    async with engine:
        await engine.flow.set_limits("rated", rate=5, burst=5)
        await engine.enqueue_many([engine.new_job("quick", {"i": i}) for i in range(15)])
        async with worker(engine, concurrency=15):
            await until(lambda: _settled(engine, 15), timeout=60)
        assert runs == {i: 1 for i in range(15)}
        # The claims' own times (the bucket's clock): any 1 s holds at most rate + burst starts, and 15
        # starts at 5/s after a burst of 5 take 2 s at least.
        starts = sorted(j.started_at or 0.0 for j in await engine.list_jobs())
        assert max(sum(1 for s in starts if t <= s < t + 1.0) for t in starts) <= 10, starts
        assert starts[-1] - starts[0] >= 1.5, starts
        await _no_retries_or_dead_letters(engine)


async def test_a_worker_held_by_a_rate_limit_wakes_when_its_next_token_is_due(make_engine: EngineFactory) -> None:
    """5 jobs/s, burst 1, and a poll interval of 5 s: a worker that waited for its next poll (or a wake-up
    that never comes, as nothing is enqueued) would start one job per poll, 20 jobs in about 100 s; waking
    when the bucket has its next token, they all start well within the ceiling. Nor does it start more than
    the bucket allows."""
    engine = await make_engine(max_deliveries=2)
    runs: collections.Counter[int] = collections.Counter()

    @engine.task(queue="rated")
    async def quick(ctx: Any) -> None:
        runs[ctx.payload["i"]] += 1

    async with engine:
        await engine.flow.set_limits("rated", rate=5, burst=1)
        await engine.enqueue_many([engine.new_job("quick", {"i": i}) for i in range(20)])
        async with worker(engine, concurrency=10, poll_interval=5.0):
            await until(lambda: _settled(engine, 20), timeout=45)
        assert runs == {i: 1 for i in range(20)}
        # The claims' own times (the bucket's clock): any 1 s holds at most rate + burst starts.
        starts = sorted(j.started_at or 0.0 for j in await engine.list_jobs())
        assert max(sum(1 for s in starts if t <= s < t + 1.0) for t in starts) <= 6, starts
        await _no_retries_or_dead_letters(engine)


async def test_a_paused_queue_waits_and_runs_once_resumed(make_engine: EngineFactory) -> None:
    engine = await make_engine(max_deliveries=2, lease=1.0)
    runs: list[int] = []

    @engine.task(queue="paused")
    async def work(ctx: Any) -> None:
        runs.append(ctx.payload["i"])

    async with engine:
        await engine.queues.update("paused", paused=True)
        await engine.enqueue_many([engine.new_job("work", {"i": i}) for i in range(3)])
        async with worker(engine, lease_seconds=1.0, heartbeat_every=0.2):
            await asyncio.sleep(1.5)  # past the broker's lease: held deliveries are extended, not redelivered
            assert runs == []
            assert await states(engine) == {JobState.QUEUED: 3}
            await engine.queues.update("paused", paused=False)
            await until(lambda: _settled(engine, 3))
        assert sorted(runs) == [0, 1, 2]
        await _no_retries_or_dead_letters(engine)
