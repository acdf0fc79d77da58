"""The Redis-broker job queues of the comparison: RQ, arq, Celery, Dramatiq and Huey.

Runs in a comparison venv (never this project's): ``/tmp/jobengine-compare-redis-venv`` (RQ, Celery,
Dramatiq, Huey; redis-py 6+) and ``/tmp/jobengine-compare-arq-venv`` (arq pins redis-py below 6). Each system
gets the standard job of ``bench/README.md``: a no-op that receives ``(i, t)`` and sends one ``(i, t, now)``
record to the collector (:class:`bench.workload.Sink`), with results and retries turned off where the
system keeps them by default, so that every system does the same work per job. Every phase starts from an
empty Redis database (FLUSHDB of the db number the comparison claimed).

Worker settings (``setting``, a string): RQ ``simple`` (a SimpleWorker: one job at a time, no fork per job);
arq ``<max_jobs>``; Celery ``threads:<n>`` / ``solo`` / ``prefork:<n>``; Dramatiq ``<threads>``; Huey
``thread:<n>`` / ``process:<n>``. Always 2 worker processes (``bench/README.md``), except where the setting
itself makes processes (Celery prefork, Huey process): those say so in the table.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Sequence
from typing import Any, Protocol

from bench.workload import Sink

TASK = "bench_noop"
QUEUE = "bench"

#: The worker process's sink: the task functions below must be importable by name (RQ, Celery, Huey).
SINK = Sink()


class Producer(Protocol):
    async def enqueue_batch(self, items: Sequence[tuple[int, float]]) -> None: ...

    async def enqueue_one(self, i: int, t: float) -> None: ...

    async def active(self) -> int:
        """Jobs not finished yet (queued, or taken by a worker where the system records that)."""
        ...

    async def close(self) -> None: ...


class System(Protocol):
    name: str
    venv: str  # which comparison venv runs it: "redis" or "arq"
    batch_api: bool  # False: the batch phase loops over single enqueues (no batch API)

    async def producer(self, url: str) -> Producer: ...

    def work(self, url: str, setting: str) -> None:
        """Run one worker in this process until SIGINT / SIGTERM (graceful)."""
        ...


def _wait_for_signal() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


# -- RQ -------------------------------------------------------------------------------------------------
def rq_noop(i: int, t: float) -> None:
    SINK.send(i, t)


class _RqProducer:
    def __init__(self, url: str) -> None:
        from redis import Redis
        from rq import Queue
        from rq.registry import StartedJobRegistry

        self._conn = Redis.from_url(url)
        self._queue = Queue(QUEUE, connection=self._conn)
        self._started = StartedJobRegistry(queue=self._queue)

    async def enqueue_batch(self, items: Sequence[tuple[int, float]]) -> None:
        from rq import Queue

        datas = [Queue.prepare_data(rq_noop, (i, t), result_ttl=0, failure_ttl=60) for i, t in items]
        self._queue.enqueue_many(datas)

    async def enqueue_one(self, i: int, t: float) -> None:
        self._queue.enqueue(rq_noop, i, t, result_ttl=0, failure_ttl=60)

    async def active(self) -> int:
        return int(self._queue.count) + int(self._started.count)

    async def close(self) -> None:
        self._conn.close()


class Rq:
    name, venv, batch_api = "rq", "redis", True

    async def producer(self, url: str) -> Producer:
        return _RqProducer(url)

    def work(self, url: str, setting: str) -> None:
        from redis import Redis
        from rq import Queue, SimpleWorker

        conn = Redis.from_url(url)
        worker = SimpleWorker([Queue(QUEUE, connection=conn)], connection=conn)
        worker.work(with_scheduler=False, logging_level="WARNING")  # handles SIGINT / SIGTERM itself


# -- arq -------------------------------------------------------------------------------------------------
async def arq_noop(ctx: Any, i: int, t: float) -> None:
    SINK.send(i, t)


class _ArqProducer:
    def __init__(self, pool: Any) -> None:
        self._pool = pool

    async def enqueue_batch(self, items: Sequence[tuple[int, float]]) -> None:
        # No batch API: the chunk's enqueues run concurrently on the pool.
        await asyncio.gather(*(self._pool.enqueue_job(TASK, i, t) for i, t in items))

    async def enqueue_one(self, i: int, t: float) -> None:
        await self._pool.enqueue_job(TASK, i, t)

    async def active(self) -> int:
        # A job stays in the queue's sorted set until it finished.
        return int(await self._pool.zcard("arq:queue"))

    async def close(self) -> None:
        await self._pool.aclose()


class Arq:
    name, venv, batch_api = "arq", "arq", False

    async def producer(self, url: str) -> Producer:
        from arq import create_pool
        from arq.connections import RedisSettings

        return _ArqProducer(await create_pool(RedisSettings.from_dsn(url)))

    def work(self, url: str, setting: str) -> None:
        from arq.connections import RedisSettings
        from arq.worker import Worker, func

        worker = Worker(
            functions=[func(arq_noop, name=TASK)], redis_settings=RedisSettings.from_dsn(url), max_jobs=int(setting),
            keep_result=0, max_tries=1, poll_delay=0.05, log_results=False, handle_signals=True,
        )  # fmt: skip
        worker.run()


# -- Celery ----------------------------------------------------------------------------------------------
def _celery_app(url: str) -> Any:
    from celery import Celery

    app = Celery("bench", broker=url)
    app.conf.update(
        task_ignore_result=True, task_default_queue=QUEUE, worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True, worker_prefetch_multiplier=16,
    )  # fmt: skip

    @app.task(name=TASK, ignore_result=True)
    def celery_noop(i: int, t: float) -> None:
        SINK.send(i, t)

    return app


class _CeleryProducer:
    def __init__(self, url: str) -> None:
        self._app = _celery_app(url)
        self._task = self._app.tasks[TASK]
        self._client = self._app.connection_for_write().default_channel.client

    async def enqueue_batch(self, items: Sequence[tuple[int, float]]) -> None:
        with self._app.producer_or_acquire() as producer:
            for i, t in items:
                self._task.apply_async((i, t), producer=producer)

    async def enqueue_one(self, i: int, t: float) -> None:
        self._task.apply_async((i, t))

    async def active(self) -> int:
        # Waiting messages, plus those delivered to a worker and not yet acked.
        return int(self._client.llen(QUEUE)) + int(self._client.hlen("unacked"))

    async def close(self) -> None:
        self._app.close()


class CeleryQ:
    name, venv, batch_api = "celery", "redis", False

    async def producer(self, url: str) -> Producer:
        return _CeleryProducer(url)

    def work(self, url: str, setting: str) -> None:
        pool, _, n = setting.partition(":")
        args = ["worker", "-P", pool, "-l", "WARNING", "--without-heartbeat", "--without-gossip", "--without-mingle",
                "-Q", QUEUE]  # fmt: skip
        if n:
            args += ["-c", n]
        _celery_app(url).worker_main(args)


# -- Dramatiq --------------------------------------------------------------------------------------------
def _dramatiq_actor(url: str) -> Any:
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(url=url)
    dramatiq.set_broker(broker)

    @dramatiq.actor(actor_name=TASK, queue_name=QUEUE, max_retries=0, broker=broker)
    def dramatiq_noop(i: int, t: float) -> None:
        SINK.send(i, t)

    return broker, dramatiq_noop


class _DramatiqProducer:
    def __init__(self, url: str) -> None:
        self._broker, self._actor = _dramatiq_actor(url)

    async def enqueue_batch(self, items: Sequence[tuple[int, float]]) -> None:
        for i, t in items:
            self._actor.send(i, t)

    async def enqueue_one(self, i: int, t: float) -> None:
        self._actor.send(i, t)

    async def active(self) -> int:
        # Every message's body stays in this hash until acked.
        return int(self._broker.client.hlen(f"dramatiq:{QUEUE}.msgs"))

    async def close(self) -> None:
        self._broker.close()


class Dramatiq:
    name, venv, batch_api = "dramatiq", "redis", False

    async def producer(self, url: str) -> Producer:
        return _DramatiqProducer(url)

    def work(self, url: str, setting: str) -> None:
        import dramatiq

        broker, _ = _dramatiq_actor(url)
        stop = _wait_for_signal()
        worker = dramatiq.Worker(broker, worker_threads=int(setting), worker_timeout=100)
        worker.start()
        stop.wait()
        worker.stop()


# -- Huey ------------------------------------------------------------------------------------------------
def _huey(url: str) -> tuple[Any, Any]:
    from huey import RedisHuey

    huey = RedisHuey(QUEUE, url=url, results=False, utc=True)

    @huey.task(name=TASK)
    def huey_noop(i: int, t: float) -> None:
        SINK.send(i, t)

    return huey, huey_noop


class _HueyProducer:
    def __init__(self, url: str) -> None:
        self._huey, self._task = _huey(url)

    async def enqueue_batch(self, items: Sequence[tuple[int, float]]) -> None:
        for i, t in items:
            self._task(i, t)

    async def enqueue_one(self, i: int, t: float) -> None:
        self._task(i, t)

    async def active(self) -> int:
        return int(self._huey.pending_count())  # Huey keeps no record of running tasks

    async def close(self) -> None:
        pass


class Huey:
    name, venv, batch_api = "huey", "redis", False

    async def producer(self, url: str) -> Producer:
        return _HueyProducer(url)

    def work(self, url: str, setting: str) -> None:
        kind, _, n = setting.partition(":")
        huey, _ = _huey(url)
        consumer = huey.create_consumer(workers=int(n or 1), worker_type=kind, periodic=False)
        consumer.run()  # SIGINT: graceful stop


SYSTEMS: dict[str, System] = {s.name: s for s in (Rq(), Arq(), CeleryQ(), Dramatiq(), Huey())}
