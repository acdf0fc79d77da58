"""SSE: resumption with Last-Event-ID (no gap, no duplicate), the reset event, keep-alives, the job stream,
and dropping a client that stops reading."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from jobengine.core.ids import short_id
from jobengine.core.models import NewJob
from jobengine.engine import Engine
from jobengine.http.server import ApiService

from .conftest import Api, MakeApi


@dataclass
class Frame:
    id: str | None = None
    event: str | None = None
    data: str = ""
    comments: list[str] = field(default_factory=list)


async def frames(response: httpx.Response) -> AsyncIterator[Frame]:
    """SSE frames as they arrive (comment-only frames too, so keep-alives are visible)."""
    frame = Frame()
    async for line in response.aiter_lines():
        if line == "":
            if frame.id is not None or frame.event is not None or frame.data or frame.comments:
                yield frame
            frame = Frame()
        elif line.startswith(":"):
            frame.comments.append(line[1:].strip())
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                frame.data += value
            elif name in ("id", "event"):
                setattr(frame, name, value)


@dataclass
class Served:
    api: Api
    url: str


@asynccontextmanager
async def serve(api: Api) -> AsyncIterator[Served]:
    service = ApiService(api.engine, api.engine.settings, host="127.0.0.1", port=0, app=api.app)
    await service.start()
    try:
        yield Served(api, service.url)
    finally:
        await service.stop()


async def test_fifty_random_disconnects_while_5000_events_are_emitted(make_api: MakeApi) -> None:
    rng = random.Random(20240501)
    async with make_api(sse_buffer=200, sse_poll_interval=0.2) as api, serve(api) as served:
        # A second engine on the same file is "another process": its events never reach this bus.
        other = Engine.from_settings(api.engine.settings)
        await other.start()
        total, done = 5000, asyncio.Event()

        async def produce() -> None:
            made = 0
            while made < total:
                n = rng.randint(1, 40)
                n = min(n, total - made)
                engine = other if rng.random() < 0.3 else api.engine
                await engine.enqueue_many([NewJob(task="t", tenant="acme") for _ in range(n)])
                # Noise of another tenant, which the stream must leave out.
                await api.engine.enqueue_many([NewJob(task="t", tenant="globex")])
                made += n
                await asyncio.sleep(rng.random() * 0.004)
            done.set()

        producer = asyncio.create_task(produce())
        cuts = sorted(rng.sample(range(1, total), 50))  # disconnect after this many events in all
        received: list[int] = []
        disconnects = 0
        last: str | None = "0"
        headers = {"Authorization": f"Bearer {api.keys['acme']}"}
        started = time.monotonic()
        async with httpx.AsyncClient(base_url=served.url, headers=headers, timeout=30) as client:
            while len(received) < total:
                cut_at = cuts[disconnects] if disconnects < len(cuts) else None
                h = {"Last-Event-ID": last} if last is not None else {}
                async with client.stream("GET", "/api/v1/events/stream", headers=h) as response:
                    assert response.status_code == 200
                    assert response.headers["content-type"].startswith("text/event-stream")
                    async for frame in frames(response):
                        if frame.event is None:
                            continue
                        assert frame.event == "job.enqueued", frame
                        event = json.loads(frame.data)
                        assert event["tenant"] == "acme" and str(event["id"]) == frame.id
                        received.append(event["id"])
                        last = frame.id
                        if len(received) == total or len(received) == cut_at:
                            break
                if cut_at is not None and len(received) == cut_at:
                    disconnects += 1
        await producer
        elapsed = time.monotonic() - started
        expected = [e.id for e in await api.engine.events(0, 100_000, tenant="acme")]
        await other.close()
        assert len(expected) == total
        assert received == expected  # every event, once, in order
        assert disconnects == 50
        print(f"\nSSE: {total} events over {disconnects + 1} connections in {elapsed:.1f}s, none lost or repeated")


async def test_an_expired_position_gets_a_reset_event(make_api: MakeApi) -> None:
    async with make_api(event_retention=60.0) as api, serve(api) as served:
        engine = api.engine
        await engine.enqueue_many([NewJob(task="old", tenant="acme") for _ in range(5)])
        old = await engine.events(0, 100, tenant="acme")
        # Age the first events past retention, then prune them.
        assert await engine.store.prune_events(old[2].at + 0.0001, 3) == 3  # type: ignore[attr-defined]
        await engine.enqueue_many([NewJob(task="new", tenant="acme")])
        headers = {"Authorization": f"Bearer {api.keys['acme']}", "Last-Event-ID": str(old[0].id)}
        async with (
            httpx.AsyncClient(base_url=served.url, headers=headers, timeout=60) as c,
            c.stream("GET", "/api/v1/events/stream") as r,
        ):
            got = []
            async for frame in frames(r):
                if frame.event:
                    got.append(frame)
                if len(got) == 4:
                    break
        reset = json.loads(got[0].data)
        assert got[0].event == "reset" and reset["reason"] == "expired"
        assert (reset["requested"], reset["oldest"]) == (old[0].id, old[3].id)
        assert got[0].id == str(old[3].id - 1)
        assert [int(f.id or 0) for f in got[1:3]] == [old[3].id, old[4].id]
        assert json.loads(got[3].data)["task"] == "new"


async def test_job_stream_keepalives_and_a_stream_that_starts_now(make_api: MakeApi) -> None:
    async with make_api(sse_keepalive=0.2) as api, serve(api) as served:
        headers = {"Authorization": f"Bearer {api.keys['acme']}"}
        async with httpx.AsyncClient(base_url=served.url, headers=headers, timeout=60) as c:
            job = (await c.post("/api/v1/jobs", json={"task": "t"})).json()
            await c.post("/api/v1/jobs", json={"task": "other"})
            await c.post(f"/api/v1/jobs/{job['id']}/cancel")
            async with c.stream("GET", f"/api/v1/jobs/{short_id(job['id'])}/stream") as r:  # a prefix names it
                events, pings = [], 0
                async for frame in frames(r):
                    pings += len(frame.comments)
                    if frame.event:
                        events.append(frame.event)
                    if len(events) == 2 and pings:
                        break
            assert events == ["job.enqueued", "job.cancelled"] and pings
            # Without a position, the stream starts with what happens next.
            async with c.stream("GET", "/api/v1/events/stream", params={"type": "job.enqueued"}) as r:
                it = frames(r)
                await c.post("/api/v1/jobs", json={"task": "later"})
                frame = await anext(f async for f in it if f.event)
                assert json.loads(frame.data)["task"] == "later"


async def test_a_client_that_stops_reading_is_dropped_at_its_buffer_cap(make_api: MakeApi) -> None:
    async with make_api(sse_buffer=50, sse_keepalive=60.0) as api:
        ctx = api.app.state.jobengine
        sent: list[dict[str, Any]] = []
        stuck = asyncio.Event()

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if len(sent) >= 2:  # the start and one frame reach the client, then its socket is full
                stuck.set()
                await asyncio.Event().wait()

        async def receive() -> dict[str, Any]:
            await asyncio.Event().wait()  # the client never closes the connection
            raise AssertionError

        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
            "path": "/api/v1/events/stream", "raw_path": b"/api/v1/events/stream", "query_string": b"after=0",
            "headers": [(b"authorization", f"Bearer {api.keys['acme']}".encode()), (b"host", b"api")],
            "client": ("127.0.0.1", 1), "server": ("api", 80),
        }  # fmt: skip
        await api.engine.enqueue_many([NewJob(task="t", tenant="acme")])
        call = asyncio.create_task(api.app(scope, receive, send))
        await asyncio.wait_for(stuck.wait(), 60)
        assert ctx.metrics.sse_clients._value.get() == 1
        await api.engine.enqueue_many([NewJob(task="t", tenant="acme") for _ in range(120)])  # past the cap
        await asyncio.wait_for(call, 60)  # dropped: the app returned
        assert ctx.metrics.sse_dropped._value.get() == 1
        assert ctx.metrics.sse_clients._value.get() == 0
        assert not api.engine.bus._subs  # its subscription is gone
