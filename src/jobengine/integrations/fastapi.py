"""Run the engine with a FastAPI app: a lifespan that starts it (migrations, the outbox relay) before the
first request and closes it after the last, optionally with a worker in the same process; and a dependency
that hands it to a route.

Usage::

    from fastapi import FastAPI
    from jobengine.integrations.fastapi import EngineDep, jobengine_lifespan

    engine = Engine.from_settings(Settings.load())
    app = FastAPI(lifespan=jobengine_lifespan(engine))

    @app.post("/orders/{order_id}/ship")
    async def ship(order_id: int, engine: EngineDep) -> dict[str, str]:
        job = await engine.enqueue("ship_order", {"order_id": order_id})
        return {"job": job.id}
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request

from jobengine.engine import Engine


def jobengine_lifespan(
    engine: Engine, *, worker: bool = False, **worker_options: Any
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """A lifespan for ``FastAPI(lifespan=...)``: starts ``engine`` and puts it on ``app.state.jobengine``
    (where :func:`get_engine` finds it); at shutdown stops the worker, if any, letting its jobs finish within
    the grace period, and closes the engine. ``worker``: also run :meth:`Engine.worker` (with
    ``worker_options``, e.g. ``concurrency=4``) in this process. A failure to start (an unreachable store)
    fails the app's startup, as does an unknown worker option (ConfigError). Usage::

        app = FastAPI(lifespan=jobengine_lifespan(engine, worker=True, queues=("default", "mail")))

    Inside a lifespan of the app's own::

        @asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncIterator[None]:
            async with jobengine_lifespan(engine)(app):
                yield
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with engine:
            app.state.jobengine = engine
            if not worker:
                yield
                return
            running = engine.worker(**worker_options)  # an unknown option: ConfigError, the startup fails
            task = asyncio.create_task(running.run(), name="jobengine-worker")
            try:
                yield
            finally:
                running.stop()
                await task

    return lifespan


def get_engine(request: Request) -> Engine:
    """A FastAPI dependency: the engine :func:`jobengine_lifespan` started. RuntimeError when the app has no
    such lifespan (a wiring mistake, not a client's). Usage::

        @app.get("/jobs/{job_id}")
        async def job(job_id: str, engine: Annotated[Engine, Depends(get_engine)]) -> dict[str, str]:
            return {"state": (await engine.get_job(job_id)).state}
    """
    engine = getattr(request.app.state, "jobengine", None)
    if not isinstance(engine, Engine):
        raise RuntimeError("no engine on app.state: create the app with FastAPI(lifespan=jobengine_lifespan(engine))")
    return engine


#: A route parameter typed ``EngineDep`` receives the engine (:func:`get_engine`).
EngineDep = Annotated[Engine, Depends(get_engine)]
