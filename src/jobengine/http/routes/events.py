"""``/api/v1/events`` (a page after an id), ``/api/v1/events/stream`` and ``/api/v1/jobs/{id}/stream`` (SSE).

Filters: ``job_id``, ``queue``, ``run_id`` (the run's own events and those of its jobs), ``type``
(repeatable; an exact type like ``job.dead`` or a prefix like ``job.*``). Only the key's tenant's events
are ever read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from starlette.responses import Response

from jobengine.core.models import Event
from jobengine.engine import Engine
from jobengine.http.auth import Principal, require
from jobengine.http.context import context
from jobengine.http.responses import READ, READ_ONE, json_response
from jobengine.http.routes.jobs import JobIdPath, NameQuery
from jobengine.http.schemas import EventPage
from jobengine.http.sse import FeedResponse
from jobengine.serialize import event_to_json

router = APIRouter(prefix="/api/v1", tags=["events"])

MAX_ID = 2**62
_SCAN_LIMIT = 10_000  # events read at most to fill one filtered page

TypeQuery = Annotated[
    list[Annotated[str, Query(min_length=1, max_length=100, pattern=r"^[a-z][a-z0-9_]*\.([a-z0-9_.]+|\*)$")]] | None,
    Query(max_length=20, description="Event types: `job.dead`, or a prefix such as `job.*`"),
]
RunQuery = Annotated[str | None, Query(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:\-]+$")]
JobQuery = Annotated[str | None, Query(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:\-]+$")]
_STREAM: dict[int | str, dict[str, Any]] = {
    200: {"description": "An SSE stream of events", "content": {"text/event-stream": {"schema": {"type": "string"}}}}
}


class EventSelector:
    """The filters the store does not apply: ``type``, ``queue`` and ``run_id`` (an event of the run
    itself, or of one of its jobs: each job is looked up once, then remembered)."""

    _MEMORY = 100_000  # job ids remembered at most (a long stream forgets and looks up again)

    def __init__(
        self, engine: Engine, tenant: str, types: Sequence[str] | None, queue: str | None, run_id: str | None
    ) -> None:
        self.engine = engine
        self.tenant = tenant
        self.exact = {t for t in types or () if not t.endswith("*")}
        self.prefixes = tuple(t[:-1] for t in types or () if t.endswith("*"))
        self.queue = queue
        self.run_id = run_id
        self._in_run: dict[str, bool] = {}

    @property
    def active(self) -> bool:
        return bool(self.exact or self.prefixes or self.queue is not None or self.run_id is not None)

    def _plain(self, e: Event) -> bool:
        if (self.exact or self.prefixes) and e.type not in self.exact and not e.type.startswith(self.prefixes):
            return False
        return self.queue is None or e.queue == self.queue

    async def select(self, events: Sequence[Event]) -> list[Event]:
        out = [e for e in events if self._plain(e)]
        if self.run_id is None:
            return out
        unknown = list(dict.fromkeys(e.job_id for e in out if e.job_id and e.job_id not in self._in_run))
        if unknown:
            if len(self._in_run) > self._MEMORY:
                self._in_run.clear()
            found = {j.id: j.run_id for j in await self.engine.get_jobs(unknown, self.tenant)}
            self._in_run.update({i: found.get(i) == self.run_id for i in unknown})
        return [e for e in out if e.data.get("run_id") == self.run_id or (e.job_id and self._in_run.get(e.job_id))]


@router.get("/events", response_model=EventPage, responses=READ)
async def list_events(
    request: Request,
    principal: Annotated[Principal, Depends(require("jobs:read"))],
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="Events with a greater id")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    job_id: JobQuery = None,
    queue: NameQuery = None,
    type: TypeQuery = None,
    run_id: RunQuery = None,
) -> Response:
    """The tenant's events after ``after``, oldest first. ``last_id`` is where the next page starts (it
    moves past events that the filters left out). On PostgreSQL a page ends before an event id whose
    transaction is still open, and ``last_id`` stays before it: the next page returns it once committed."""
    engine = context(request).engine
    selector = EventSelector(engine, principal.tenant, type, queue, run_id)
    items: list[dict[str, Any]] = []
    cursor, scanned = after, 0
    size = 500 if selector.active else limit
    while len(items) < limit and scanned < _SCAN_LIMIT:
        read = await engine.event_log.read_settled(cursor, size, job_id=job_id, tenant=principal.tenant)
        batch = read.events
        wanted = {e.id for e in await selector.select(batch)} if selector.active else None
        for e in batch:
            cursor = e.id
            if wanted is None or e.id in wanted:
                items.append(event_to_json(e))
                if len(items) >= limit:
                    break
        else:  # the whole read was taken: its cursor may reach past events that are not the tenant's
            cursor = max(cursor, read.cursor)
        scanned += len(batch)
        if read.complete:
            break
    return json_response({"items": items, "last_id": cursor})


def _stream(request: Request, tenant: str, after: int, job_id: str | None, selector: EventSelector | None) -> Response:
    ctx = context(request)
    feed = ctx.engine.event_log.feed(after_id=after, tenant=tenant, job_id=job_id)
    select = selector.select if selector is not None and selector.active else None
    return FeedResponse(feed, ctx.metrics, ctx.settings.sse_keepalive, lambda: ctx.closing, select)


LastEventId = Annotated[
    int | None,
    Header(alias="Last-Event-ID", ge=0, le=MAX_ID, description="Resume after this event id (set by SSE clients)"),
]
AfterQuery = Annotated[int | None, Query(ge=0, le=MAX_ID, description="Start after this id (Last-Event-ID wins)")]


@router.get("/events/stream", response_class=Response, responses={**_STREAM, **READ_ONE})
async def stream_events(
    request: Request,
    principal: Annotated[Principal, Depends(require("jobs:read"))],
    last_event_id: LastEventId = None,
    after: AfterQuery = None,
    job_id: JobQuery = None,
    queue: NameQuery = None,
    type: TypeQuery = None,
    run_id: RunQuery = None,
) -> Response:
    """Every event of the tenant as it happens (SSE). Without ``Last-Event-ID`` or ``after`` it starts
    with new events only."""
    engine = context(request).engine
    # 404 for an unknown or foreign job or run, as their own resources answer; a unique prefix names its id.
    if job_id is not None:
        job_id = await engine.jobs.resolve_id(job_id, principal.tenant)
    if run_id is not None:
        run_id = (await engine.runs.get(run_id, principal.tenant)).id
    start = last_event_id if last_event_id is not None else after
    if start is None:
        start = await _newest(request)
    return _stream(
        request, principal.tenant, start, job_id, EventSelector(engine, principal.tenant, type, queue, run_id)
    )


@router.get("/jobs/{job_id}/stream", response_class=Response, responses={**_STREAM, **READ_ONE})
async def stream_job(
    job_id: JobIdPath,
    request: Request,
    principal: Annotated[Principal, Depends(require("jobs:read"))],
    last_event_id: LastEventId = None,
    after: AfterQuery = None,
) -> Response:
    """One job's events (SSE), from its first one unless ``Last-Event-ID`` / ``after`` say otherwise. The job
    may be named by a unique prefix of its id; 404 for an unknown or foreign job."""
    job_id = await context(request).engine.jobs.resolve_id(job_id, principal.tenant)
    start = last_event_id if last_event_id is not None else (after or 0)
    return _stream(request, principal.tenant, start, job_id, None)


async def _newest(request: Request) -> int:
    """The newest event id, so that a stream without a position starts with what happens next."""
    return await context(request).engine.event_log.newest_id()
