"""A remote worker: task handlers registered here, run by the in-process :class:`Worker` runtime over HTTP.

Usage::

    from jobengine.sdk import RemoteWorker, TaskApp

    app = TaskApp()

    @app.task(max_attempts=5)
    async def resize(ctx):
        ctx.progress(0.5)
        return {"ok": True}

    asyncio.run(RemoteWorker("http://jobs.internal:8080", key="je_...", tasks=app).run())

``run()`` returns after :meth:`RemoteWorker.stop` (SIGTERM / SIGINT with ``handle_signals=True``): claiming
stops, jobs in flight may finish within ``grace_period``, the rest are released (queued again, no attempt
spent); a second stop releases them at once. ``jobengine worker --remote URL --key K --app mod:attr``
runs one from the command line, with the tasks of an ``Engine`` or a ``TaskApp``.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from jobengine.core.locations import redact_url
from jobengine.core.retry import RetryPolicy
from jobengine.middleware import Middleware
from jobengine.sdk.client import ApiClient
from jobengine.sdk.source import HttpWorkerSource
from jobengine.tasks import PhaseSpec, TaskFn, TaskRegistry, make_spec
from jobengine.worker.arguments import adapt_task
from jobengine.worker.runtime import Worker, WorkerOptions

if TYPE_CHECKING:  # prometheus_client only where metrics are kept
    from jobengine.worker.metrics import WorkerObserver

F = TypeVar("F", bound=TaskFn)


class TaskApp:
    """Task handlers for a remote worker (an Engine's tasks work too: anything with ``.tasks``)."""

    def __init__(self) -> None:
        self.tasks = TaskRegistry()

    def task(
        self,
        name: str | None = None,
        *,
        queue: str = "default",
        max_attempts: int = 3,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> Callable[[F], F]:
        def register(fn: F) -> F:
            self.add_task(name or fn.__name__, fn, queue=queue, max_attempts=max_attempts, timeout=timeout,
                          retry=retry)  # fmt: skip
            return fn

        return register

    def add_task(
        self,
        name: str,
        fn: TaskFn | None = None,
        *,
        phases: Sequence[TaskFn | PhaseSpec] | None = None,
        queue: str = "default",
        max_attempts: int = 3,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        """Register a function, or ordered ``phases``; their parameters are the job's arguments, as for
        ``Engine.add_task`` (a parameter typed ``JobContext``, or one named ``ctx``, gets the context)."""
        fn, phases, _ = adapt_task(name, fn, phases)
        self.tasks.add(make_spec(name, fn, phases, queue=queue, priority=0, max_attempts=max_attempts,
                                 timeout=timeout, retry=retry))  # fmt: skip


class RemoteWorker:
    def __init__(
        self,
        url: str,
        *,
        key: str | None,
        tasks: TaskRegistry | Any,
        queues: Sequence[str] = (),
        concurrency: int = 10,
        lease_seconds: float = 30.0,
        heartbeat_every: float | None = None,
        grace_period: float = 30.0,
        long_poll: float = 5.0,
        worker_id: str | None = None,
        client: ApiClient | None = None,
        observer: WorkerObserver | None = None,
        middleware: Iterable[Middleware] = (),
    ) -> None:
        """``middleware``: hooks around each attempt (:mod:`jobengine.middleware`), such as
        :class:`jobengine.tracing.TracingMiddleware`, whose run spans join the trace each claimed job carries."""
        registry = tasks if isinstance(tasks, TaskRegistry) else tasks.tasks
        if not isinstance(registry, TaskRegistry):
            raise TypeError("tasks: a TaskRegistry, or an object with one in .tasks (TaskApp, Engine)")
        self.client = client or ApiClient(url, key)
        self.source = HttpWorkerSource(self.client, registry, long_poll=long_poll)
        options = WorkerOptions(
            queues=tuple(queues), concurrency=concurrency, lease_seconds=lease_seconds,
            heartbeat_every=heartbeat_every or lease_seconds / 3, grace_period=grace_period,
            rescue_interval=3600.0,  # the server rescues; the source's rescue is a no-op anyway
            worker_id=worker_id, observer=observer,
            setup=(("store", f"the server at {redact_url(url)}"), ("transport", "http (the server's API)")),
        )  # fmt: skip
        self.worker = Worker(self.source, options, middleware)

    def stop(self) -> None:
        """First call: graceful; second: release jobs in flight now."""
        self.source.interrupt()
        self.worker.stop()

    async def run(self, *, handle_signals: bool = False) -> None:
        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self.stop)
        try:
            await self.worker.run()
        finally:
            if handle_signals:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
            await self.client.aclose()
