"""The prefetch buffer: jobs a worker claimed beyond its free slots, started as slots free up.

A claim costs one round trip and one commit whatever its size, so a worker whose claims are only as large as
its free slots spends most of its time claiming when its jobs are short. Claiming ahead makes the claim
independent of ``concurrency``. What it costs: a claimed job that waits in one worker's buffer is held from
other workers that might start it sooner. So the buffer holds only the jobs this worker expects to start
within ``seconds`` (Little's law: ``concurrency * seconds / recent job duration``), never more than ``limit``,
and a job that waited :data:`HOLD` seconds without a slot goes back to the queue (no attempt spent). Long
jobs make the target 0, and the worker claims as many as its free slots, as without a buffer.

Buffered jobs are leased (``running`` in the store) from their claim: the worker extends their leases with
its running jobs' and releases them when it stops.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

from jobengine.core.ids import JobId
from jobengine.core.models import Job

#: Seconds a claimed job may wait in the buffer for a slot before it goes back to the queue.
HOLD = 1.0

#: How far one job's duration moves the estimate down: it rises at once to a longer job (a slow job makes the
#: buffer shrink now) and falls over a few dozen shorter ones.
DECAY = 0.05


class Prefetch:
    """The jobs claimed ahead, oldest first, with the loop time each was claimed at. Usage::

    buffer = Prefetch(limit, seconds, concurrency)
    buffer.ran(duration)            # a job ended, after ``duration`` seconds
    buffer.target()                 # how many to claim beyond the free slots
    """

    __slots__ = ("_claimed", "_duration", "_jobs", "concurrency", "limit", "seconds")

    def __init__(self, limit: int, seconds: float, concurrency: int) -> None:
        self.limit, self.seconds, self.concurrency = limit, seconds, concurrency
        self._jobs: deque[Job] = deque()
        self._claimed: deque[float] = deque()
        self._duration: float | None = None  # None: no job ended yet, so nothing is claimed ahead

    def __len__(self) -> int:
        return len(self._jobs)

    def ran(self, seconds: float) -> None:
        """A job ran (or waited) this long: the estimate of a job's duration rises to it at once, or falls."""
        d = self._duration
        self._duration = seconds if d is None or seconds > d else d + (seconds - d) * DECAY

    def target(self) -> int:
        """How many jobs to hold ahead: those this worker starts within ``seconds``, at most ``limit``."""
        d = self._duration
        if d is None or self.limit <= 0:
            return 0
        if d <= 0:
            return self.limit
        return min(self.limit, math.floor(self.concurrency * self.seconds / d))

    def put(self, jobs: Iterable[Job], now: float) -> None:
        for job in jobs:
            self._jobs.append(job)
            self._claimed.append(now)

    def take(self) -> Job | None:
        if not self._jobs:
            return None
        self._claimed.popleft()
        return self._jobs.popleft()

    def hold_left(self, now: float) -> float | None:
        """Seconds until the oldest job has waited :data:`HOLD`; None when the buffer is empty."""
        return self._claimed[0] + HOLD - now if self._claimed else None

    def overdue(self, now: float) -> list[Job]:
        """Take out the jobs that waited :data:`HOLD` or longer, and count the wait as a job's duration: slots
        busy that long mean jobs that long, so the buffer stays empty until shorter ones end."""
        out = []
        while self._claimed and self._claimed[0] + HOLD <= now:
            self._claimed.popleft()
            out.append(self._jobs.popleft())
        if out:
            self.ran(HOLD)
        return out

    def jobs(self) -> list[Job]:
        return list(self._jobs)

    def drop(self, ids: Iterable[JobId]) -> list[Job]:
        """Take out the jobs of ``ids`` (their leases were lost), keeping the order of the rest."""
        gone = set(ids)
        kept = [(j, t) for j, t in zip(self._jobs, self._claimed, strict=True) if j.id not in gone]
        dropped = [j for j in self._jobs if j.id in gone]
        self._jobs = deque(j for j, _ in kept)
        self._claimed = deque(t for _, t in kept)
        return dropped

    def drain(self) -> list[Job]:
        """Take out every job (the worker is stopping: they go back to the queue)."""
        jobs = list(self._jobs)
        self._jobs.clear()
        self._claimed.clear()
        return jobs
