"""The store's notifier: notify() wakes a waiter at once; with no sign, wait() times out."""

from __future__ import annotations

import asyncio

from jobengine.ports.store import Store


async def test_notify_wakes_a_waiter(store: Store) -> None:
    notifier = store.notifier()
    waiter = asyncio.create_task(notifier.wait(5.0))
    await asyncio.sleep(0.01)
    notifier.notify()
    assert await asyncio.wait_for(waiter, 1.0) is True


async def test_a_notify_before_the_wait_is_not_lost(store: Store) -> None:
    notifier = store.notifier()
    notifier.notify()
    assert await notifier.wait(1.0) is True


async def test_wait_times_out_without_a_sign(store: Store) -> None:
    notifier = store.notifier()
    assert await notifier.wait(0.05) is False


async def test_the_same_notifier_every_time(store: Store) -> None:
    assert store.notifier() is store.notifier()
