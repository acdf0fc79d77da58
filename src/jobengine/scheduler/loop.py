"""The scheduler's loop: while this process leads, fire what is due, plan runs whose turn came, and now and
then reconcile runs with their jobs. Every replica runs the loop; only the leader does the passes.

Leadership saves work, it does not make firing safe: exactly once comes from the store (the unique tick
key and the cursor compare-and-set, see ``ports/schedules.py``), so a leader that lost its lease without
noticing, or two leaders during a fail-over, still fire every tick once.

Failure policy: a pass that fails (the database is down) is logged and the loop goes on; the ticks it
could not fire are fired by a later pass (within the misfire grace, as on time).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from dataclasses import dataclass
from typing import Protocol

from jobengine.core.clock import Clock
from jobengine.core.runs import Run
from jobengine.ports.leader import Leader

log = logging.getLogger("jobengine.scheduler")


class SchedulerSource(Protocol):
    """What the loop needs: the scheduler's passes (``engine.scheduler``, a
    :class:`~jobengine.scheduler.passes.SchedulerPasses`)."""

    clock: Clock

    async def fire_due_schedules(self, *, fired_by: str | None = None) -> list[Run]: ...

    async def plan_waiting_runs(self) -> list[Run]: ...

    async def reconcile_runs(self) -> int: ...

    async def next_schedule_fire_at(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    #: Longest sleep between passes: how soon a schedule created in another process is seen, and how
    #: often a follower asks to lead.
    poll_interval: float = 1.0
    reconcile_interval: float = 10.0
    instance: str | None = None  # recorded on the runs this process fires (default host:pid:random)


class SchedulerLoop:
    def __init__(self, source: SchedulerSource, leader: Leader, options: SchedulerOptions | None = None) -> None:
        self.source = source
        self.leader = leader
        self.options = opts = options or SchedulerOptions()
        if opts.poll_interval <= 0 or opts.reconcile_interval <= 0:
            raise ValueError("poll_interval and reconcile_interval must be positive")
        self.instance = opts.instance or f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        self.passes = 0  # passes run as leader (for tests and status output)
        self.fired = 0  # runs fired by this process
        self.leading = False
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()
        self._last_reconcile = float("-inf")

    def wake(self) -> None:
        """Run a pass now (a schedule changed in this process)."""
        self._wake.set()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    async def run(self) -> None:
        """Until :meth:`stop`; gives leadership up on the way out."""
        try:
            while not self._stopped.is_set():
                wait = self.options.poll_interval
                try:
                    wait = await self.step()
                except Exception:
                    log.exception("scheduler pass failed; trying again in %gs", self.options.poll_interval)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
        finally:
            with contextlib.suppress(Exception):
                await self.leader.release()
            self.leading = False

    async def step(self) -> float:
        """One pass if leading; returns how long to sleep before the next."""
        leading = await self.leader.try_acquire()
        if leading != self.leading:
            log.info("scheduler %s: %s", self.instance, "leading" if leading else "following")
            self.leading = leading
        if not leading:
            return self.options.poll_interval
        fired = await self.source.fire_due_schedules(fired_by=self.instance)
        fired += await self.source.plan_waiting_runs()
        self.fired += len(fired)
        self.passes += 1
        now = self.source.clock.now()
        if now - self._last_reconcile >= self.options.reconcile_interval:
            self._last_reconcile = now
            await self.source.reconcile_runs()
        nxt = await self.source.next_schedule_fire_at()
        if nxt is None:
            return self.options.poll_interval
        # Wake just after the next tick (not before: the tick must have passed to be due).
        return min(self.options.poll_interval, max(0.0, nxt - self.source.clock.now()) + 0.001)
