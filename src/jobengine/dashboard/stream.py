"""The live parts of pages, over Server-Sent Events (htmx's SSE extension swaps each frame in).

A stream sends rendered HTML: the fragment of the page that changes (event ``job`` for a job's page,
``overview`` for the overview, the list's name for a live list, ``run`` for a run's page, ``graph`` for a
graph's page; ``jobs`` and ``dead`` for the rows of the job list and the dead letter) and, for the overview,
the chart's series as JSON (event ``chart``). A job's stream re-reads and re-renders when the job has an
event — the engine's event feed wakes it: the bus in this process, the store for other processes' commits
(every ``sse_poll_interval``); workers save progress with a ``phase.progress`` event every
``progress_every`` — and at least every ``sse_keepalive``. The overview, the lists, a run's page and a
graph's page re-render every ``dashboard_refresh_seconds`` from the store, so what other processes did shows
too. A frame is sent only when its HTML changed. A stream ends when the server stops (the browser reconnects
by itself), and within ``sse_keepalive`` of its session ending (logout, its key revoked, expiry).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

import anyio
from fastapi import APIRouter
from sse_starlette.event import ServerSentEvent
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from jobengine.core.models import JobFilter
from jobengine.core.states import JobState
from jobengine.dashboard import session as sess
from jobengine.dashboard.base import HtmlRoute, engine, state
from jobengine.dashboard.overview import overview
from jobengine.dashboard.session import DashboardError
from jobengine.dashboard.views_graphs import graph_values, graphs_values
from jobengine.dashboard.views_jobs import PAGE, job_id_param, job_values, newest_events, search_of
from jobengine.dashboard.views_ops import (
    failures_values,
    queues_values,
    run_values,
    runs_values,
    schedules_values,
    workers_values,
)
from jobengine.dashboard.views_packs import packs_values
from jobengine.errors import JobEngineError, NotFound
from jobengine.http.context import ApiContext, context

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)


class _Stream(EventSourceResponse):
    """Ends as soon as the server is stopping (``ApiContext.closing``), like the API's streams, so an open
    dashboard tab never holds up a shutdown; the browser reconnects by itself."""

    def __init__(self, frames: AsyncIterator[ServerSentEvent], ctx: ApiContext) -> None:
        super().__init__(frames, ping=ctx.settings.sse_keepalive, sep="\n", headers={"Cache-Control": "no-store"})
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tg:

            async def watchdog() -> None:
                while True:
                    await anyio.sleep(0.1)
                    if self.ctx.closing:
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(watchdog)
            await super().__call__(scope, receive, send)
            tg.cancel_scope.cancel()


def _respond(frames: AsyncIterator[ServerSentEvent], request: Request) -> Response:
    return _Stream(frames, context(request))


class _Watch:
    """Whether a stream's session still holds (not logged out, its key not revoked, not expired), read at
    most every ``sse_keepalive``: a stream opened before the session ended stops within that time."""

    def __init__(self, request: Request, session: sess.Session) -> None:
        self.request = request
        self.session = session
        self.every = context(request).settings.sse_keepalive
        self.due = time.monotonic() + self.every

    async def holds(self) -> bool:
        if time.monotonic() < self.due:
            return True
        self.due = time.monotonic() + self.every
        return await sess.still_valid(self.request, self.session)


@router.get("/ui/stream/job/{job_id}")
async def job_stream(request: Request, job_id: str) -> Response:
    session = await sess.require(request, "jobs:read")
    eng = engine(request)
    # An unknown or another tenant's job: 404 before streaming; a unique prefix names its job.
    job_id = await eng.jobs.resolve_id(job_id_param(job_id), session.tenant)
    start = await eng.event_log.newest_id()

    async def frames() -> AsyncIterator[ServerSentEvent]:
        ctx = context(request)
        st = state(request)
        feed = eng.event_log.feed(after_id=start, tenant=session.tenant, job_id=job_id)
        watch = _Watch(request, session)
        last = None
        try:
            await feed.open()
            # The events shown are kept here and extended with what the feed brings (no re-read of the log).
            recent = await newest_events(request, job_id, session.tenant)
            while not ctx.closing and await watch.holds():
                try:
                    values = await job_values(request, session, job_id, recent)
                except NotFound:
                    return  # deleted meanwhile (retention, purge): nothing more to show

                html = st.renderer.text("_job_live.html", values)
                if html != last:
                    last = html
                    yield ServerSentEvent(html, event="job")
                newest = recent[-1].id if recent else 0
                recent.extend(e for e in await feed.next(timeout=ctx.settings.sse_keepalive) if e.id > newest)
        finally:
            feed.close()

    return _respond(frames(), request)


#: What a live list re-renders: its values for the session (the page's own query string applies).
ListValues = Callable[[Request, sess.Session], Awaitable[Mapping[str, Any]]]

#: The live lists: name (also the SSE event) -> the scope it needs, its fragment, its values.
LISTS: Final[Mapping[str, tuple[str, str, ListValues]]] = MappingProxyType({
    "workers": ("jobs:read", "_workers_live.html", workers_values),
    "queues": ("jobs:read", "_queues_live.html", queues_values),
    "schedules": ("schedules:read", "_schedules_live.html", schedules_values),
    "runs": ("schedules:read", "_runs_live.html", runs_values),
    "failures": ("schedules:read", "_failures_live.html", failures_values),
    "graphs": ("graph:read", "_graphs_live.html", graphs_values),
    "packs": ("packs:read", "_packs_live.html", packs_values),
})  # fmt: skip


def _periodic(
    request: Request, session: sess.Session, template: str, event: str, values: ListValues
) -> AsyncIterator[ServerSentEvent]:
    """Frames of ``template`` re-rendered every ``dashboard_refresh_seconds``, sent when the HTML changed.
    Reading the store each time shows what other processes did, not only this one."""

    async def frames() -> AsyncIterator[ServerSentEvent]:
        ctx = context(request)
        st = state(request)
        watch = _Watch(request, session)
        last = None
        while not ctx.closing and await watch.holds():
            try:
                found = await values(request, session)
            except NotFound:
                return  # deleted meanwhile (a run's retention): nothing more to show
            except JobEngineError:
                return  # the store is closing or down: the browser reconnects and is told
            html = st.renderer.text(template, {**found, "session": session, "csrf": session.csrf})
            if html != last:
                last = html
                yield ServerSentEvent(html, event=event)
            await anyio.sleep(st.refresh)

    return frames()


@router.get("/ui/stream/list/{name}")
async def list_stream(request: Request, name: str) -> Response:
    """A live list (``LISTS``), with the query string of the page it is on (filters, cursor)."""
    found = LISTS.get(name)
    if found is None:
        raise DashboardError(404, f"no live list {name!r} ({', '.join(LISTS)})", "name")
    scope, template, values = found
    session = await sess.require(request, scope)
    await values(request, session)  # a bad filter is a 422 page now, not a stream that ends at once
    return _respond(_periodic(request, session, template, name, values), request)


@router.get("/ui/stream/run/{run_id}")
async def run_stream(request: Request, run_id: str) -> Response:
    return await _one_stream(request, "schedules:read", "run", lambda r, s: run_values(r, s, run_id))


@router.get("/ui/stream/graph/{graph_id}")
async def graph_stream(request: Request, graph_id: str) -> Response:
    return await _one_stream(request, "graph:read", "graph", lambda r, s: graph_values(r, s, graph_id))


async def _one_stream(
    request: Request,
    scope: str,
    name: str,
    values: Callable[[Request, sess.Session], Awaitable[Mapping[str, Any]]],
) -> Response:
    """The live frames of one thing's page (``_<name>_live.html``): an unknown id or another tenant's is a
    404 before streaming."""
    session = await sess.require(request, scope)
    await values(request, session)
    return _respond(_periodic(request, session, f"_{name}_live.html", name, values), request)


@router.get("/ui/stream/overview")
async def overview_stream(request: Request) -> Response:
    session = await sess.require(request, "jobs:read")

    async def frames() -> AsyncIterator[ServerSentEvent]:
        ctx = context(request)
        st = state(request)
        watch = _Watch(request, session)
        last = None
        while not ctx.closing and await watch.holds():
            data = await overview(engine(request), session.tenant, st.recorder, st.refresh)
            html = st.renderer.text("_overview_live.html", {**data, "session": session, "csrf": session.csrf})
            if html != last:
                last = html
                yield ServerSentEvent(html, event="overview")
                yield ServerSentEvent(json.dumps(data["series"]), event="chart")
            await anyio.sleep(st.refresh)

    return _respond(frames(), request)


def _rows_stream(request: Request, session: sess.Session, filt: JobFilter, template: str, event: str) -> Response:
    """The rows of a job list's first page, live like the other lists: new jobs appear and states change
    without a reload."""

    async def values(request: Request, session: sess.Session) -> Mapping[str, Any]:
        return {"jobs": await engine(request).list_jobs(filt)}

    return _respond(_periodic(request, session, template, event, values), request)


@router.get("/ui/stream/jobs")
async def jobs_stream(request: Request) -> Response:
    session = await sess.require(request, "jobs:read")
    filt, _ = search_of(request.query_params.getlist, session.tenant)
    return _rows_stream(request, session, filt, "_jobs_rows.html", "jobs")


@router.get("/ui/stream/dead")
async def dead_stream(request: Request) -> Response:
    session = await sess.require(request, "jobs:read")
    filt = JobFilter(tenant=session.tenant, states=(JobState.DEAD,), limit=PAGE)
    return _rows_stream(request, session, filt, "_dead_rows.html", "dead")
