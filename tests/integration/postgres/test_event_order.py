"""Event ids that commit out of order: a follower of the log never moves past one that is still to commit.

On PostgreSQL an event's id is taken at insert. Here a transaction takes an id (an enqueue in the caller's
own transaction, left open), then the store commits a later id. A feed must not deliver the later one and
move on: it waits for the hole to fill (the open transaction commits) and then delivers both, in id order.
A hole that never fills (a rollback) holds the feed back for ``event_settle_grace`` only. The paged
``GET /api/v1/events`` and the dashboard's recorder read through the same ``Engine.event_log.read_settled``:
a page stops before the hole and its ``last_id`` does not pass it.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import psycopg

from jobengine.dashboard.stats import Recorder
from jobengine.engine import Engine
from jobengine.http import create_app
from jobengine.settings import Settings


async def _drain(feed: object, seconds: float) -> list[int]:
    """The ids a feed delivers within ``seconds``."""
    got: list[int] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        got += [e.id for e in await feed.next(timeout=left)]  # type: ignore[attr-defined]
    return got


async def test_a_feed_waits_for_an_id_that_commits_after_a_later_one(postgres_dsn: str) -> None:
    async with Engine.from_settings(Settings(database=postgres_dsn, sse_poll_interval=0.05)) as engine:
        await engine.enqueue("t", {"n": 0})
        start = await engine.event_log.newest_id()
        feed = engine.event_log.feed(after_id=start)
        try:
            async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
                async with conn.transaction():
                    early = await engine.enqueue("t", {"n": 1}, connection=conn)  # takes the next id, open
                    late = await engine.enqueue("t", {"n": 2})  # a later id, committed at once
                    held = await _drain(feed, 0.5)
                    assert held == [], "the feed passed an id whose transaction was still open"
                # Committed now: both arrive, in id order, each once.
                got = await _drain(feed, 1.0)
            events = await engine.events(start, 10)
            assert [e.job_id for e in events] == [early.id, late.id]
            assert got == [e.id for e in events]
            assert feed.cursor == events[-1].id
        finally:
            feed.close()


async def test_a_hole_left_by_a_rollback_holds_the_feed_for_the_grace_only(postgres_dsn: str) -> None:
    settings = Settings(database=postgres_dsn, sse_poll_interval=0.05, event_settle_grace=0.5)
    async with Engine.from_settings(settings) as engine:
        await engine.enqueue("t", {"n": 0})
        start = await engine.event_log.newest_id()
        feed = engine.event_log.feed(after_id=start)
        try:
            async with (
                await psycopg.AsyncConnection.connect(postgres_dsn) as conn,
                conn.transaction(force_rollback=True),
            ):
                await engine.enqueue("t", {"n": 1}, connection=conn)  # its id is never committed
            late = await engine.enqueue("t", {"n": 2})
            began = time.monotonic()
            got: list[int] = []
            while not got:
                got = [e.id for e in await feed.next(timeout=3.0)]
                assert time.monotonic() - began < 3.0, "the feed never passed the hole of a rollback"
            assert time.monotonic() - began >= 0.3, "the feed passed the hole without waiting for its grace"
            (event,) = await engine.events(start, 10)
            assert event.job_id == late.id and got == [event.id] and event.id > start + 1
        finally:
            feed.close()


async def test_without_holes_the_feed_delivers_at_once(postgres_dsn: str) -> None:
    async with Engine.from_settings(Settings(database=postgres_dsn, sse_poll_interval=0.05)) as engine:
        start = await engine.event_log.newest_id()
        feed = engine.event_log.feed(after_id=start)
        try:
            jobs = await engine.enqueue_many([engine.new_job("t", {"i": i}) for i in range(700)])
            got: list[int] = []
            while len(got) < 700:
                batch = await asyncio.wait_for(feed.next(timeout=2.0), 5.0)
                assert batch, "the feed stalled without a hole"
                got += [e.id for e in batch]
            assert got == sorted(set(got)) and len(got) == len(jobs)
        finally:
            feed.close()


async def test_an_events_page_stops_before_an_id_that_commits_after_a_later_one(postgres_dsn: str) -> None:
    settings = Settings(database=postgres_dsn)
    async with Engine.from_settings(settings) as engine:
        recorder = Recorder(engine)
        _, key = await engine.keys.create("default", ["jobs:read"])
        app = create_app(engine, settings)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://pg",
                                     headers=headers) as http:  # fmt: skip

            async def page(after: int, **params: object) -> tuple[list[int], int]:
                r = await http.get("/api/v1/events", params={"after": after, **params})
                assert r.status_code == 200, r.text
                return [e["id"] for e in r.json()["items"]], r.json()["last_id"]

            await engine.enqueue("t", {"n": 0})
            start = await engine.event_log.newest_id()
            async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
                async with conn.transaction():
                    early = await engine.enqueue("t", {"n": 1}, connection=conn)  # takes the next id, open
                    late = await engine.enqueue("t", {"n": 2})  # a later id, committed at once
                    assert await engine.event_log.newest_id() > start + 1
                    # The page ends before the open id, and so does its cursor (also through the filters,
                    # which read in batches of their own, and for a page of one).
                    assert await page(0) == ([start], start)
                    for params in ({}, {"type": "job.*"}, {"queue": "default"}, {"limit": 1}):
                        assert await page(start, **params) == ([], start), params
                    await recorder.pull()  # counts up to the hole only
                    assert sum(recorder.series("default")["enqueued"]) == 1
                # Committed now: the next page, from the cursor handed out, returns both in id order.
                ids, last = await page(start)
            events = await engine.events(start, 10)
            assert [e.job_id for e in events] == [early.id, late.id]
            assert ids == [e.id for e in events] and last == events[-1].id
            await recorder.pull()  # the late commit is counted, not skipped
            assert sum(recorder.series("default")["enqueued"]) == 3
