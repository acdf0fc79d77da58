"""The live view of ``jobengine up``: every event this process's engine publishes, one rich line each."""

from __future__ import annotations

import asyncio
import contextlib

from rich.console import Console

from jobengine.bus import Subscription
from jobengine.cli import output
from jobengine.core.models import Event
from jobengine.engine import Engine


class LiveView:
    """A :class:`~jobengine.services.Service` printing the engine's bus, line by line, as it happens.

    It sees what this process does (its enqueues, its worker's transitions, retention); a job enqueued by
    another process shows up once this process's worker starts it. Lines are never lost to a slow terminal
    without notice: if the subscription overflows, the number of lines dropped is printed on stop.
    """

    name = "live-view"

    def __init__(self, engine: Engine, console: Console) -> None:
        self.engine = engine
        self.console = console
        self._sub: Subscription | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._sub is None:
            self._sub = self.engine.bus.subscribe()
            self._task = asyncio.create_task(self._print_forever(), name="jobengine-live-view")

    async def stop(self) -> None:
        sub, task = self._sub, self._task
        if sub is None or task is None:
            return
        self._sub = self._task = None
        task.cancel()  # Queue.get is cancellation-safe: an event it was waiting for stays queued
        with contextlib.suppress(asyncio.CancelledError):
            await task
        # Events published before stop() (the worker's last outcomes) are queued already; print them too.
        with contextlib.suppress(TimeoutError):
            while True:
                async with asyncio.timeout(0.05):
                    self._print(await sub.get())
        sub.close()
        if sub.dropped:
            self.console.print(f"[yellow]{sub.dropped} events were not shown (the terminal fell behind)[/yellow]")

    async def _print_forever(self) -> None:
        assert self._sub is not None
        while True:
            self._print(await self._sub.get())

    def _print(self, event: Event) -> None:
        spec = self.engine.tasks.get(event.task) if event.task else None
        self.console.print(output.event_line(event, len(spec.phase_names) if spec else 0), soft_wrap=True)
