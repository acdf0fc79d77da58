"""The app of ``bench/hosts.py``'s processes: the standard job (``bench/workload.py``'s ``bench_noop``) with
settings from ``JOBENGINE_*``, as the deploy files give them to every host.

The body reports ``(i, t, now)`` in one record to ``$HOSTS_BENCH_SOCKET`` (a path-named AF_UNIX socket:
it reaches across network namespaces, which only separate the network), then, when the payload has
``sleep`` (seconds), waits that long: the I/O-bound variant of the job, a call to another service that
takes time but no CPU. The API host has no socket: it never runs the task.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from bench.workload import TASK, Sink
from jobengine.engine import Engine
from jobengine.settings import Settings


def app() -> Engine:
    engine = Engine.from_settings(Settings.load())
    sink = Sink()
    socket_path = os.environ.get("HOSTS_BENCH_SOCKET")
    if socket_path:
        sink.connect(socket_path)

    @engine.task(name=TASK)
    async def bench_noop(ctx: Any) -> None:
        payload = ctx.payload
        sink.send(payload["i"], payload["t"])
        if payload.get("sleep"):
            await asyncio.sleep(payload["sleep"])

    return engine
