"""The outbox relay on a SQLite store, with a recording transport (no broker needed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest

from jobengine.backends.sqlite import SqliteStore
from jobengine.core.clock import ManualClock
from jobengine.core.models import NewJob
from jobengine.delivery.relay import BRISK, STORE_LOOK_EVERY, OutboxRelay
from jobengine.errors import TransportUnavailable
from jobengine.ports.transport import Message

T0 = 1_700_000_000.0


class Recording:
    """Just enough of a Transport for the relay: records publishes, de-duplicates keys, can fail."""

    def __init__(self) -> None:
        self.published: list[Message] = []
        self.keys: set[str] = set()
        self.fail = 0
        self.tasks: list[str] = []  # the name of the task of every publish
        self.calls: list[int] = []  # the messages of every publish

    async def publish(self, messages: Sequence[Message]) -> list[bool]:
        task = asyncio.current_task()
        self.tasks.append(task.get_name() if task is not None else "")
        self.calls.append(len(messages))
        if self.fail:
            self.fail -= 1
            raise TransportUnavailable("down")
        out = []
        for m in messages:
            new = m.dedupe_key not in self.keys
            self.keys.add(m.dedupe_key)
            if new:
                self.published.append(m)
            out.append(new)
        return out


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(str(tmp_path / "jobs.db"))
    await store.migrate()
    try:
        yield store
    finally:
        await store.close()


async def test_due_rows_are_published_once_and_deleted(store: SqliteStore) -> None:
    clock = ManualClock(T0)
    transport = Recording()
    relay = OutboxRelay(store, transport, clock)
    jobs = [NewJob("t"), NewJob("t", run_at=T0 + 60)]
    out = await store.insert_jobs_outboxed(jobs, T0, [(), ()], headers={jobs[0].id: {"run_id": "r1"}})
    assert [r.job_id for r in out.rows] == [j.id for j in jobs]
    assert await relay.run_once() == 1  # the scheduled one is not due
    assert [(m.id, m.run_id) for m in transport.published] == [(jobs[0].id, "r1")]
    assert await relay.run_once() == 0
    await relay.flush()  # the published rows are deleted in batches, later
    clock.advance(61)
    assert await relay.run_once() == 1
    assert [m.id for m in transport.published] == [j.id for j in jobs]
    await relay.flush()
    assert await store.outbox_due(clock.now() + 3600) == (False, None)


async def test_offered_rows_are_published_without_a_claim(store: SqliteStore) -> None:
    clock = ManualClock(T0)
    transport = Recording()
    relay = OutboxRelay(store, transport, clock)
    out = await store.insert_jobs_outboxed([NewJob("t")], T0, [()], hold=30.0)
    assert await store.claim_outbox(T0, 10, 1.0) == []  # born held by the relay that will publish it
    relay.offer(out.rows)
    assert await relay.run_once() == 1
    await relay.flush()
    assert await store.claim_outbox(T0 + 3600, 10, 1.0) == []  # deleted, never claimed


async def _until(condition: Callable[[], bool], ceiling: float = 30.0) -> None:
    async with asyncio.timeout(ceiling):
        while not condition():  # noqa: ASYNC110 - the relay announces nothing
            await asyncio.sleep(0.01)


async def test_a_running_relay_publishes_offered_rows_from_its_publisher_not_its_loop(store: SqliteStore) -> None:
    clock = ManualClock(T0)
    transport = Recording()
    relay = OutboxRelay(store, transport, clock, idle=3600.0)  # the loop would not look again for an hour
    await relay.start()
    try:
        out = await store.insert_jobs_outboxed([NewJob("t") for _ in range(3)], T0, [()] * 3, hold=30.0)
        relay.offer(out.rows[:1])
        relay.offer(out.rows[1:])
        await _until(lambda: len(transport.published) == 3)
        assert set(transport.tasks) == {"jobengine-publish"}
    finally:
        await relay.stop()
    assert [m.id for m in transport.published] == [r.job_id for r in out.rows]
    assert await store.claim_outbox(T0 + 3600, 10, 1.0) == []  # deleted (at the latest by the stop's flush)


async def test_rows_offered_in_quick_succession_share_a_publish_and_a_lone_row_goes_at_once(
    store: SqliteStore,
) -> None:
    clock = ManualClock(T0)
    transport = Recording()
    relay = OutboxRelay(store, transport, clock, idle=3600.0)
    await relay.start()
    try:
        out = await store.insert_jobs_outboxed([NewJob("t") for _ in range(5)], T0, [()] * 5, hold=30.0)
        rows = out.rows
        relay.offer(rows[:1])  # the first offer in a while: published at the publisher's first step
        await asyncio.sleep(0)
        assert transport.calls == [1]
        relay.offer(rows[1:2])  # less than BRISK after the last: the publisher waits for more ...
        await asyncio.sleep(0)
        assert transport.calls == [1]
        relay.offer(rows[2:3])  # ... and takes this one with it
        await _until(lambda: len(transport.published) == 3)
        assert transport.calls == [1, 2]
        clock.advance(2 * BRISK)  # offers further apart than BRISK again: each at once
        relay.offer(rows[3:4])
        await asyncio.sleep(0)
        assert transport.calls == [1, 2, 1]
        clock.advance(2 * BRISK)
        relay.offer(rows[4:5])
        await asyncio.sleep(0)
        assert transport.calls == [1, 2, 1, 1]
    finally:
        await relay.stop()
    assert [m.id for m in transport.published] == [r.job_id for r in rows]


async def test_rows_the_publisher_could_not_publish_go_to_the_loop(store: SqliteStore) -> None:
    clock = ManualClock(T0)
    transport = Recording()
    relay = OutboxRelay(store, transport, clock, idle=0.05)
    await relay.start()
    try:
        out = await store.insert_jobs_outboxed([NewJob("t")], T0, [()], hold=30.0)
        transport.fail = 1
        relay.offer(out.rows)
        await _until(lambda: len(transport.published) == 1)
    finally:
        await relay.stop()
    assert transport.tasks == ["jobengine-publish", "jobengine-outbox-relay"]
    assert [m.id for m in transport.published] == [out.rows[0].job_id]


async def test_another_process_rows_wake_the_relay_which_looks_at_the_outbox_sparingly(
    store: SqliteStore, tmp_path: Path
) -> None:
    clock = ManualClock(T0)
    transport = Recording()
    looks = 0
    due = store.outbox_due

    async def counted(now: float) -> tuple[bool, float | None]:
        nonlocal looks
        looks += 1
        return await due(now)

    store.outbox_due = counted  # type: ignore[method-assign]
    notifier = store.notifier()
    relay = OutboxRelay(store, transport, clock, notifier, idle=3600.0)  # only a wake-up makes it look
    other = SqliteStore(str(tmp_path / "jobs.db"))  # another process: no relay, its rows not held
    await relay.start()
    try:
        await _until(lambda: looks >= 1)  # the first round looked, and waits
        before, started = looks, time.monotonic()
        # 200 commits within ~0.4 s, each of which wakes the relay through the store's notifier: every one
        # of them may be the row of a process that will never publish it.
        for _ in range(200):
            await other.insert_jobs([NewJob("noise")], T0, [()])
            await asyncio.sleep(0.002)
        out = await other.insert_jobs_outboxed([NewJob("t")], T0, [()])
        await _until(lambda: len(transport.published) == 1)
        # One look per round, and at most one round per STORE_LOOK_EVERY: not one (or two) per commit.
        rounds = (time.monotonic() - started) / STORE_LOOK_EVERY
        assert looks - before <= rounds + 2, (looks - before, rounds)
    finally:
        await relay.stop()
        await notifier.close()
        await other.close()
    assert [m.id for m in transport.published] == [out.rows[0].job_id]


async def test_a_failed_publish_keeps_the_rows_and_a_crash_republishes_harmlessly(store: SqliteStore) -> None:
    clock = ManualClock(T0)
    transport = Recording()
    relay = OutboxRelay(store, transport, clock, hold=30.0)
    job = NewJob("t")
    await store.insert_jobs_outboxed([job], T0, [()])
    transport.fail = 1
    with pytest.raises(TransportUnavailable):
        await relay.run_once()
    assert await relay.run_once() == 1  # the rows it held, published on the next attempt
    await relay.flush()
    # A relay that published and died before deleting: after the hold another one publishes again.
    await store.insert_jobs_outboxed([NewJob("t")], T0, [()])
    rows = await store.claim_outbox(clock.now(), 10, 30.0)
    await transport.publish([Message(r.job_id, r.queue, key=r.job_id) for r in rows])
    clock.advance(31)
    assert await OutboxRelay(store, transport, clock).run_once() == 1
    assert len(transport.published) == 2  # the copy was swallowed by the key


async def test_the_sweep_publishes_overdue_runnable_jobs_again(store: SqliteStore) -> None:
    clock = ManualClock(T0)
    transport = Recording()
    relay = OutboxRelay(store, transport, clock, sweep_after=60.0)
    late = await store.insert_jobs([NewJob("t")], T0, [()])  # no outbox row: its message was "lost"
    assert await relay.sweep() == 0
    clock.advance(61)
    assert await relay.sweep() == 1
    assert [m.id for m in transport.published] == [late.jobs[0].id]


async def test_a_lost_history_publishes_every_runnable_job_again_page_by_page(store: SqliteStore) -> None:
    clock = ManualClock(T0)
    transport = Recording()
    relay = OutboxRelay(store, transport, clock, sweep_after=300.0, batch=3)
    # Young (the regular sweep would wait 300 s for them), due later, and more than a page of the same run_at.
    now = await store.insert_jobs([NewJob("t") for _ in range(5)], T0, [()] * 5)
    later = await store.insert_jobs([NewJob("t", run_at=T0 + 3600)], T0, [()])
    running = await store.insert_jobs([NewJob("t")], T0, [()])
    await store.claim_jobs([running.jobs[0].id], "w", 30.0, T0)  # type: ignore[arg-type]
    assert await relay.sweep() == 0
    assert await relay.sweep_lost("h2") == 6
    runnable = {j.id for j in now.jobs + later.jobs}
    assert sorted(m.id for m in transport.published) == sorted(runnable)
    # Another process's relay that saw the same change adds nothing: the key names the history.
    assert await OutboxRelay(store, transport, clock, batch=3).sweep_lost("h2") == 0
    assert await relay.sweep_lost("h3") == 6


async def test_the_relay_loop_sweeps_once_it_is_told_the_history_was_lost(store: SqliteStore) -> None:
    clock = ManualClock(T0)
    transport = Recording()
    relay = OutboxRelay(store, transport, clock, idle=0.05)
    jobs = await store.insert_jobs([NewJob("t") for _ in range(3)], T0, [()] * 3)
    await relay.start()
    try:
        relay.history_lost("h2")
        for _ in range(200):
            if len(transport.published) == 3:
                break
            await asyncio.sleep(0.05)
    finally:
        await relay.stop()
    assert sorted(m.id for m in transport.published) == sorted(j.id for j in jobs.jobs)
    assert {m.key for m in transport.published} == {f"{j.id}:lost:h2:0" for j in jobs.jobs}
