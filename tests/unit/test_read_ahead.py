"""Caches read ahead (``engine.ahead``): past half their time they are served at once while one read runs in
the background; past their whole time a caller waits for a read; a change made in this process meanwhile
is not undone by a read that began before it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace

import pytest

from jobengine.engine import queues
from jobengine.engine.queues import QUEUE_SETTINGS_TTL, QueueSettingsCache
from jobengine.ports.queues import QueueSettings


class _Settings:
    """A queue settings store whose reads can be held open."""

    def __init__(self) -> None:
        self.rows: dict[str, QueueSettings] = {}
        self.reads = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def list_queue_settings(self) -> Sequence[QueueSettings]:
        self.reads += 1
        await self.gate.wait()
        return list(self.rows.values())

    async def set_queue_settings(self, settings: QueueSettings) -> None:
        self.rows[settings.queue] = settings


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [100.0]
    monkeypatch.setattr(queues, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


async def _settled() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_past_half_its_time_the_cache_is_served_and_read_in_the_background(clock: list[float]) -> None:
    store = _Settings()
    cache = QueueSettingsCache(store)
    assert await cache.read() == {}
    store.rows["q"] = QueueSettings("q", paused=True)  # changed by another process
    clock[0] += QUEUE_SETTINGS_TTL / 4
    assert await cache.read() == {} and store.reads == 1  # fresh: no read
    store.gate.clear()
    clock[0] += QUEUE_SETTINGS_TTL / 2
    assert await cache.read() == {}  # past half: served at once, read behind
    assert await cache.read() == {}
    await _settled()
    assert store.reads == 2  # one read in flight, however many callers
    store.gate.set()
    await _settled()
    assert (await cache.read())["q"].paused and store.reads == 2


async def test_past_its_time_a_caller_waits_for_the_read(clock: list[float]) -> None:
    store = _Settings()
    cache = QueueSettingsCache(store)
    await cache.read()
    store.rows["q"] = QueueSettings("q", paused=True)
    clock[0] += QUEUE_SETTINGS_TTL * 2  # idle: never served older than its time
    assert (await cache.read())["q"].paused


async def test_a_read_that_began_before_a_write_does_not_undo_it(clock: list[float]) -> None:
    store = _Settings()
    cache = QueueSettingsCache(store)
    await cache.read()
    store.gate.clear()
    clock[0] += QUEUE_SETTINGS_TTL * 0.75
    await cache.read()  # a read starts behind, and is held
    await _settled()
    await cache.write(QueueSettings("q", paused=True))
    store.rows.clear()  # what the held read will answer: the store as it was when the read began
    store.gate.set()
    await _settled()
    assert (await cache.read())["q"].paused
