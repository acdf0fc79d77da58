"""The store's finished-jobs notifier: a job reaching a terminal state wakes its ``wait`` (Engine.wait_for)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from jobengine.core.models import FailOutcome, Job
from jobengine.ports.notifier import Notifier
from jobengine.ports.store import Store

from .helpers import T0, claim, completion, enqueue, failure, new

Finish = Callable[[Store, Job], Awaitable[object]]


async def _succeed(store: Store, job: Job) -> object:
    [running] = await claim(store)
    return await store.complete_jobs([completion(running, 1)], T0 + 1)


async def _die(store: Store, job: Job) -> object:
    [running] = await claim(store)
    return await store.fail_jobs([failure(running, T0 + 1, FailOutcome.DEAD)], T0 + 1)


async def _cancel(store: Store, job: Job) -> object:
    return await store.cancel_jobs([job.id], "no longer wanted", T0 + 1)


async def _settled(notifier: Notifier) -> None:
    """Take the wake-ups of opening (PostgreSQL wakes once when its LISTEN is in place) until a quiet second."""
    while await notifier.wait(1.0):
        pass


@pytest.mark.parametrize("finish", [_succeed, _die, _cancel], ids=["succeeded", "dead", "cancelled"])
async def test_a_job_that_ends_wakes_the_finished_notifier(store: Store, finish: Finish) -> None:
    [job] = await enqueue(store, new())
    notifier = store.finished_notifier()
    try:
        await _settled(notifier)
        waiter = asyncio.create_task(notifier.wait(30.0))
        await asyncio.sleep(0.05)
        await finish(store, job)
        assert await waiter is True
    finally:
        await notifier.close()


async def test_each_call_is_a_new_notifier_apart_from_the_workers(store: Store) -> None:
    first, second = store.finished_notifier(), store.finished_notifier()
    try:
        assert first is not second
        assert first is not store.notifier()
    finally:
        await first.close()
        await second.close()
