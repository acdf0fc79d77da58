"""How a long-running command (``up``, ``worker``, ``serve``, ``scheduler``) stops (it logs through
:mod:`jobengine.cli.logs`).

The first SIGINT / SIGTERM stops claiming jobs and lets the ones in flight finish within the grace period (the
rest are released back to ``queued`` without spending an attempt); a second one releases them at once.
Either way the process exits 0, also when the signal comes while the process is still starting (importing
the app, loading packs): :class:`EarlySignals` holds it until the :class:`Supervisor` takes over.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, Sequence
from types import FrameType, TracebackType

from jobengine.services import Service, WorkerService

# Log records, not console lines: under --log-format json every line on stderr is one JSON object.
log = logging.getLogger("jobengine.cli")


class EarlySignals:
    """SIGINT / SIGTERM from the first line of a command until its :class:`Supervisor` takes them over.

    Without it, a signal that comes while the command imports the app or loads packs ends the process the
    default way (killed by SIGTERM, a traceback for SIGINT): a deployment stopping a worker that just started
    would see it fail. The first signal is kept for the Supervisor (which then stops at once, as nothing was
    claimed yet); a second one ends the process with exit code 0 there and then, as nothing is in flight."""

    def __init__(self) -> None:
        self.names: list[str] = []

    @classmethod
    def install(cls) -> EarlySignals:
        """Take SIGINT / SIGTERM over (only the main thread may; elsewhere the handlers stay as they are)."""
        early = cls()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, early._on_signal)
        return early

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.names.append(signal.Signals(signum).name)
        if len(self.names) > 1:
            raise SystemExit(0)


class Supervisor:
    """Owns SIGINT / SIGTERM while entered and runs services until the first one (see :meth:`serve`).

    Enter it before anything slow (migrations, loading packs), so a SIGTERM during start-up is a clean stop
    too; ``worker`` may be given later (before :meth:`serve`). Signals that ``early`` caught before are
    handled as it is entered.
    """

    def __init__(self, worker: WorkerService | None, early: EarlySignals | None = None) -> None:
        self.worker = worker
        self.early = early
        self.signals = 0
        self._stop = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _on_signal(self, name: str) -> None:
        self.signals += 1
        if self.signals == 1:
            grace = f" within {self.worker.worker.options.grace_period:g}s" if self.worker is not None else ""
            log.info("%s: stopping — jobs in flight may finish%s; signal again to release them now", name, grace)
            self._stop.set()
        elif self.signals == 2:
            log.info("%s: releasing jobs in flight now", name)
            if self.worker is not None:
                self.worker.stop_now()

    async def __aenter__(self) -> Supervisor:
        self._loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.add_signal_handler(sig, self._on_signal, sig.name)
        for name in self.early.names if self.early is not None else ():
            self._on_signal(name)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._loop is not None
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.remove_signal_handler(sig)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def stop_event(self) -> asyncio.Event:
        """Set by the first signal: what a wait during start-up watches to end early."""
        return self._stop

    async def serve(self, services: Sequence[Service], ready: Callable[[], Awaitable[None]] | None = None) -> None:
        """Start ``services``, call ``ready()``, wait for a stop, then stop every started service (in
        reverse order) whatever happened. Re-raises why the worker stopped on its own, if it crashed."""
        if self.worker is not None and self.signals > 1:
            self.worker.stop_now()  # the second signal came before the worker was given
        started: list[Service] = []
        try:
            for service in services:
                await service.start()
                started.append(service)
            if ready is not None and not self.stopping:
                await ready()
            await self._wait()
        finally:
            while started:
                await started.pop().stop()

    async def _wait(self) -> None:
        assert self.worker is not None, "Supervisor.serve() without a worker"
        stop = asyncio.create_task(self._stop.wait())
        ended = asyncio.create_task(self.worker.wait())
        try:
            await asyncio.wait([stop, ended], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            ended.cancel()
        if ended.done() and not ended.cancelled():
            ended.result()
