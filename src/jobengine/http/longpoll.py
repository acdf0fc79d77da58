"""``GET /api/v1/jobs/{id}?wait=``: hold the request until the job ends, at most ``wait`` seconds.

The wait is ``Engine.wait_for``, woken by the store's notification that the job ended (from any process),
so a waiting request reads nothing meanwhile and holds no database connection. It ends early, answering
the job as it is, when the server is stopping (``ApiContext.closing``, as streams and the worker claim's
long poll do) or the client went away.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import Query
from starlette.requests import Request

from jobengine.core.models import Job
from jobengine.http.context import context

#: The longest ``?wait=`` a request may hold its connection (longer waits are a client's loop of them).
MAX_WAIT = 60.0
_WATCH = 0.5  # seconds between looks at the server's closing and the client's connection

Wait = Annotated[
    float | None,
    Query(
        ge=0,
        le=MAX_WAIT,
        description="Seconds (0 to 60) to wait for the job to end before answering. The answer is 200 either "
        "way: the job's `state` tells them apart (`succeeded`, `dead`, `cancelled` or `stale`: it ended; any "
        "other: the wait ran out and the job is shown as it is now).",
    ),
]


async def until_ended(request: Request, job: Job, wait: float) -> Job:
    """``job`` (already read for the caller's tenant) once it has ended, or as it is after ``wait`` seconds,
    when the server stops or when the client disconnects; NotFound if it is deleted meanwhile."""
    if job.terminal or wait <= 0:
        return job
    ctx = context(request)
    waiting = asyncio.ensure_future(ctx.engine.wait_for(job.id, timeout=wait))
    try:
        while not (await asyncio.wait({waiting}, timeout=_WATCH))[0]:
            if ctx.closing or await request.is_disconnected():
                break
    finally:
        waiting.cancel()
    if waiting.done() and not waiting.cancelled() and waiting.exception() is None:
        return waiting.result()
    return await ctx.engine.get_job(job.id, job.tenant)
