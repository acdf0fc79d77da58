"""The live view of ``jobengine up``: every event this process's engine publishes, one rich line each;
a phase's progress, saved every ``progress_every``, collapses into one line per job and phase."""

from __future__ import annotations

import asyncio
import contextlib

from rich.console import Console
from rich.control import Control
from rich.segment import ControlType

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
        self._progress = ProgressLines()

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
        line = output.event_line(event, len(spec.phase_names) if spec else 0)
        key = progress_key(event)
        if key is None:
            self._progress.forget()
            self.console.print(line, soft_wrap=True)
            return
        fraction = event.data.get("progress")
        step = round(float(fraction) * 100) if isinstance(fraction, int | float) else 0
        terminal = self.console.is_terminal
        if terminal and self._progress.last == key:
            # Progress of the job and phase just printed rewrites that line in place.
            self.console.control(Control((ControlType.CURSOR_UP, 1)), Control.move_to_column(0),
                                 Control((ControlType.ERASE_IN_LINE, 2)))  # fmt: skip
        elif not self._progress.worth_printing(key, step):
            return
        if terminal:  # one screen line exactly (cut, never wrapped), so the next one can replace it
            self.console.print(line, no_wrap=True, overflow="ellipsis", crop=True)
        else:
            self.console.print(line, soft_wrap=True)
        self._progress.printed(key, step)


def progress_key(event: Event) -> tuple[str, str] | None:
    """(job id, phase) of a phase's progress event, else None."""
    data = event.data
    if event.type != "job.phase" or data.get("phase_event") != "phase.progress" or not event.job_id:
        return None
    return (event.job_id, str(data.get("phase", "")))


class ProgressLines:
    """Which progress lines the live view collapses. On a terminal, progress of the job and phase printed
    last rewrites that line in place. Otherwise (another line came between, or the output is a log) a job's
    phase prints again only when its progress moved by ``LOG_STEP`` points or reached 100%, so a long phase
    leaves a few lines, not one per save."""

    LOG_STEP = 10

    def __init__(self) -> None:
        self.last: tuple[str, str] | None = None  # the key of the line printed last, if a progress line
        self.steps: dict[tuple[str, str], int] = {}

    def worth_printing(self, key: tuple[str, str], percent: int) -> bool:
        before = self.steps.get(key)
        return before is None or abs(percent - before) >= self.LOG_STEP or (percent >= 100 > before)

    def printed(self, key: tuple[str, str], percent: int) -> None:
        self.last = key
        self.steps[key] = percent
        if len(self.steps) > 10_000:  # jobs that never finish a phase: forget the oldest
            self.steps.pop(next(iter(self.steps)))

    def forget(self) -> None:
        self.last = None
