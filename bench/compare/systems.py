"""The other job queues of the comparison, behind one small interface (runs in the comparison venv).

Each system gets the standard job (``bench/README.md``): a no-op that receives ``(i, t)`` and sends one
``(i, t, now)`` record to the collector, exactly as jobengine's benchmark task does
(:class:`bench.workload.Sink`). Each phase runs on a fresh database that the system installs itself into.

- PgQueuer: asyncpg driver, ``Queries.enqueue`` (lists for a batch), ``QueueManager.run(batch_size=...)``.
  The worker setting is the dequeue batch size.
- Procrastinate: psycopg connector, ``batch_defer_async`` / ``defer_async``, ``run_worker_async`` with
  LISTEN/NOTIFY. The worker setting is the per-process concurrency.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Protocol

from bench.workload import Sink

TASK = "bench_noop"


class Producer(Protocol):
    async def enqueue_batch(self, items: Sequence[tuple[int, float]]) -> None: ...

    async def enqueue_one(self, i: int, t: float) -> None: ...

    async def active(self) -> int:
        """Jobs not finished yet (queued or running)."""
        ...

    async def close(self) -> None: ...


class System(Protocol):
    name: str
    #: What the worker setting means for this system, for the table ("batch", "concurrency").
    knob: str

    async def install(self, dsn: str) -> None: ...

    async def producer(self, dsn: str) -> Producer: ...

    async def work(self, dsn: str, sink: Sink, setting: int) -> None:
        """Run one worker in this process until SIGTERM / SIGINT."""
        ...


def _payload(i: int, t: float) -> bytes:
    return json.dumps({"i": i, "t": t}).encode()


def _stop_on_signals(stop: Any) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)


# -- PgQueuer -------------------------------------------------------------------------------------------
class _PgQueuerProducer:
    def __init__(self, conn: Any, queries: Any) -> None:
        self._conn = conn
        self._queries = queries

    async def enqueue_batch(self, items: Sequence[tuple[int, float]]) -> None:
        await self._queries.enqueue([TASK] * len(items), [_payload(i, t) for i, t in items], [0] * len(items))

    async def enqueue_one(self, i: int, t: float) -> None:
        await self._queries.enqueue(TASK, _payload(i, t))

    async def active(self) -> int:
        return int(await self._conn.fetchval("SELECT count(*) FROM pgqueuer"))

    async def close(self) -> None:
        await self._conn.close()


class PgQueuer:
    name = "pgqueuer"
    knob = "batch"

    async def install(self, dsn: str) -> None:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries

        conn = await asyncpg.connect(dsn)
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()

    async def producer(self, dsn: str) -> Producer:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries

        conn = await asyncpg.connect(dsn)
        return _PgQueuerProducer(conn, Queries(AsyncpgDriver(conn)))

    async def work(self, dsn: str, sink: Sink, setting: int) -> None:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries, QueueManager

        conn = await asyncpg.connect(dsn)
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        @qm.entrypoint(TASK)
        async def bench_noop(job: Any) -> None:
            body = json.loads(job.payload)
            sink.send(body["i"], body["t"])

        _stop_on_signals(qm.shutdown.set)
        await qm.run(batch_size=setting, dequeue_timeout=timedelta(seconds=1))
        await conn.close()


# -- Procrastinate -------------------------------------------------------------------------------------
def _procrastinate_app(dsn: str, sink: Sink | None = None) -> tuple[Any, Any]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name=TASK, queue="bench")
    async def bench_noop(i: int, t: float) -> None:
        assert sink is not None
        sink.send(i, t)

    return app, bench_noop


class _ProcrastinateProducer:
    def __init__(self, dsn: str, app: Any, task: Any) -> None:
        self._dsn = dsn
        self._app = app
        self._task = task

    async def enqueue_batch(self, items: Sequence[tuple[int, float]]) -> None:
        await self._task.batch_defer_async(*({"i": i, "t": t} for i, t in items))

    async def enqueue_one(self, i: int, t: float) -> None:
        await self._task.defer_async(i=i, t=t)

    async def active(self) -> int:
        rows = await self._app.connector.execute_query_all_async(
            "SELECT count(*) AS n FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
        )
        return int(rows[0]["n"])

    async def close(self) -> None:
        await self._app.close_async()


class Procrastinate:
    name = "procrastinate"
    knob = "concurrency"

    async def install(self, dsn: str) -> None:
        app, _ = _procrastinate_app(dsn)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    async def producer(self, dsn: str) -> Producer:
        app, task = _procrastinate_app(dsn)
        await app.open_async()
        return _ProcrastinateProducer(dsn, app, task)

    async def work(self, dsn: str, sink: Sink, setting: int) -> None:
        app, _ = _procrastinate_app(dsn, sink)
        async with app.open_async():
            await app.run_worker_async(
                queues=["bench"], concurrency=setting, wait=True, listen_notify=True,
                fetch_job_polling_interval=1.0, install_signal_handlers=True,
            )  # fmt: skip


SYSTEMS: dict[str, System] = {"pgqueuer": PgQueuer(), "procrastinate": Procrastinate()}
