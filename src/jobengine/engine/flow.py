"""Flow control (``engine.flow``): limited claims, admission of new work (backpressure, load shedding),
the adaptive limiter and scale metrics.

Limits come from the ``flow_limits`` setting, replaced per queue by stored ones (``FlowStore``), both read
with a cache of ``flow_cache_seconds``. A queue with a concurrency limit or flow limits is claimed alone
through ``FlowStore.claim_limited``, decided inside the store's claim transaction (exact across processes).
Admission reads depth and load from ``FlowStore.flow_counts`` (cached, so concurrent producers may pass a
hard limit by what they enqueue within that time). The adaptive rate and the scale window are this
process's view of the jobs it saw finish. The rules: docs/flow.md.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from jobengine.core.clock import Clock
from jobengine.core.flow.aimd import Aimd
from jobengine.core.flow.config import parse_flow_limits
from jobengine.core.flow.limits import FlowLimits
from jobengine.core.flow.pressure import Load, LoadState, Pressure, admits, load_state, pressure
from jobengine.core.flow.scale import ScaleReport, Window, percentile, report
from jobengine.core.flow.select import ClaimRule
from jobengine.core.ids import WorkerId
from jobengine.core.models import Changed, Job, NewJob, check_name
from jobengine.core.states import JobState
from jobengine.engine.ahead import ReadAhead
from jobengine.errors import InvalidJob, Overloaded, QueueFull
from jobengine.ports.flow import FlowCounts, FlowStore
from jobengine.ports.queues import QueueSettings
from jobengine.ports.store import Store
from jobengine.settings import Settings, shed_policy

T = TypeVar("T")

#: Seconds of finished jobs the scale window keeps (throughput, percentiles).
SCALE_WINDOW = 60.0
#: Seconds between two judgements of an adaptive limiter.
AIMD_INTERVAL = 5.0

#: Reads the queues' settings (paused, concurrency), cached by their owner.
QueueSettingsReader = Callable[[], Awaitable[Mapping[str, QueueSettings]]]


class FlowControl:
    """Flow limits, limited claims, admission of new work, and the signals scaling and metrics read.

    ``store`` keeps the limits and decides limited claims; ``jobs`` answers when plain queues have work
    next; ``queue_settings`` reads the queues' settings; ``notify`` wakes waiting workers.

    Usage::

        await engine.flow.set_limits("emails", rate=5.0, burst=10)
        print(await engine.flow.scale("emails"))
    """

    def __init__(
        self,
        store: FlowStore,
        jobs: Store,
        queue_settings: QueueSettingsReader,
        clock: Clock,
        settings: Settings,
        *,
        notify: Callable[[], None],
    ) -> None:
        self._store = store
        self._jobs = jobs
        self._queue_settings = queue_settings
        self._clock = clock
        self._settings = settings
        self._notify = notify
        self._configured: dict[str, FlowLimits] = parse_flow_limits(settings.flow_limits)
        self._policy = shed_policy(settings)
        self._stored: dict[str, FlowLimits] = {}
        self._stored_read_at = -1e18
        self._limit_writes = 0
        self._ahead = ReadAhead("flow-limits")
        self._counts = FlowCounts()
        self._counts_read_at = -1e18
        # The read of the counts or the stored limits in flight, per kind: callers that find the cache
        # stale while it runs wait for it rather than each sending the same read (every concurrent enqueue
        # would, every flow_cache_seconds).
        self._reading: dict[str, asyncio.Task[Any]] = {}
        self._aimd: dict[str, Aimd] = {}
        self._windows: dict[str, Window] = {}
        self._refused: Counter[tuple[str, str]] = Counter()  # (queue, reason) → enqueues refused
        self._soft: Counter[str] = Counter()  # queue → enqueues accepted under soft pressure
        self._load = LoadState(Load.NORMAL)
        #: queue → when this process last took a token of its rate limit (the claim's time)
        self._took: dict[str, float] = {}

    # -- limits -------------------------------------------------------------------------------------
    async def limits(self, *, fresh: bool = False) -> dict[str, FlowLimits]:
        """Limits by queue: configured ones, replaced by stored ones (cached ``flow_cache_seconds``, read again
        in the background past half of it: :mod:`jobengine.engine.ahead`)."""
        ttl = max(self._settings.flow_cache_seconds, 0.0)
        age = time.monotonic() - self._stored_read_at
        if fresh or age > ttl:
            await self._reload_limits(fresh)
        elif age > ttl / 2:
            self._ahead.start(self._reload_limits)
        return {**self._configured, **self._stored}

    async def _reload_limits(self, fresh: bool = False) -> None:
        writes, read_at = self._limit_writes, time.monotonic()
        stored = await self._shared_read("limits", self._store.list_flow_limits, fresh)
        if writes == self._limit_writes:  # else a change of this process came after the read began
            self._stored = {lim.queue: lim for lim in stored}
            self._stored_read_at = read_at

    async def set_limits(self, queue: str, **fields: Any) -> FlowLimits:
        """Replace the queue's flow limits with ``fields`` (FlowLimits fields; InvalidJob names a bad one).
        Queues are shared lanes: an operator's action."""
        check_name("queue", queue)
        unknown = sorted(set(fields) - set(FlowLimits.__dataclass_fields__) - {"queue", "updated_at"})
        if unknown:
            raise InvalidJob(unknown[0], "is not a flow limit")
        limits = FlowLimits(queue=queue, updated_at=self._clock.now(), **fields)
        await self._store.set_flow_limits(limits)
        self._limit_writes += 1
        self._stored[queue] = limits
        self._aimd.pop(queue, None)
        self._notify()
        return limits

    async def clear_limits(self, queue: str) -> None:
        """Remove the queue's stored limits (its configured ones, if any, apply again)."""
        check_name("queue", queue)
        await self._store.delete_flow_limits(queue)
        self._limit_writes += 1
        self._stored.pop(queue, None)
        self._aimd.pop(queue, None)
        self._notify()

    def rate(self, limits: FlowLimits) -> float | None:
        """The rate a claim of the queue uses now: the adaptive limiter's, else the configured one."""
        if not limits.adaptive or limits.rate is None:
            return limits.rate
        return self._limiter(limits).update(self._clock.now())

    def _limiter(self, limits: FlowLimits) -> Aimd:
        aimd = self._aimd.get(limits.queue)
        if aimd is None:
            rate = limits.rate or 1.0
            floor = limits.rate_floor if limits.rate_floor is not None else rate
            ceiling = limits.rate_ceiling if limits.rate_ceiling is not None else rate
            aimd = Aimd(rate, floor, ceiling, increase=max(floor, ceiling / 20), interval=AIMD_INTERVAL,
                        target_error_rate=limits.target_error_rate, target_latency=limits.target_latency)  # fmt: skip
            self._aimd[limits.queue] = aimd
        return aimd

    # -- claims -------------------------------------------------------------------------------------
    async def claim_plan(self, queues: Sequence[str], limit: int) -> list[tuple[list[str], int, ClaimRule | None]]:
        """Paused queues are left out; queues with a concurrency setting or flow limits get a claim each,
        under their rule; the rest are claimed together."""
        settings = await self._queue_settings()
        limits = await self.limits()
        plain: list[str] = []
        ruled: list[tuple[list[str], int, ClaimRule | None]] = []
        for q in dict.fromkeys(queues):
            s = settings.get(q)
            if s is not None and s.paused:
                continue
            lim = limits.get(q)
            lim = lim if lim is not None and lim.claims_limited else None
            cap = s.concurrency if s is not None else None
            if cap is None and lim is None:
                plain.append(q)
            else:
                ruled.append(([q], limit, ClaimRule(q, cap, lim, self.rate(lim) if lim else None)))
        return ([(plain, limit, None)] if plain else []) + ruled

    async def claim_limited(
        self,
        rule: ClaimRule,
        n: int,
        worker: WorkerId,
        lease_seconds: float,
        now: float,
        *,
        tasks: Sequence[str] | None = None,
        tenant: str | None = None,
    ) -> Changed:
        """Claim up to ``n`` jobs of ``rule``'s queue under the rule, decided inside the store's claim
        transaction (``tasks`` / ``tenant`` restrict it as for a plain claim)."""
        rule = replace(rule, tasks=tuple(tasks) if tasks is not None else None, tenant=tenant)
        changed = await self._store.claim_limited(rule, n, worker, lease_seconds, now)
        if rule.rate and changed.jobs:
            self._took[rule.queue] = now
        return changed

    async def next_run_at(self, queues: Sequence[str], tasks: Sequence[str] | None = None) -> float | None:
        """When a worker with nothing claimed should look again: the store's next run_at among queues
        claimed without a rule (jobs of ``tasks`` only, when given); for a rate-limited queue, when its next
        token may be there. (A queue held by a concurrency limit waits for the notifier or the poll
        interval.)"""
        plan = await self.claim_plan(queues, 1)
        plain = [q for group, _, rule in plan if rule is None for q in group]
        nxt = await self._jobs.next_run_at(plain, tasks) if plain else None
        now = self._clock.now()
        for _, _, rule in plan:
            if rule is not None and rule.rate:
                token = self.token_at(rule.queue, rule.rate, now)
                nxt = token if nxt is None else min(nxt, token)
        return nxt

    def token_at(self, queue: str, rate: float, now: float) -> float:
        """When the next token of ``queue``'s rate limit may be there: one interval after the last token
        this process took (the claim's time, not its answer's), else one interval (at most 1 s) from now.
        Another process's claim may take it first, which costs one empty claim."""
        token = now + min(1.0 / rate, 1.0)
        last = self._took.get(queue)
        if last is not None and last + 1.0 / rate > now - 1.0:
            token = max(now, min(token, last + 1.0 / rate))
        return token

    # -- admission ----------------------------------------------------------------------------------
    async def counts(self, *, fresh: bool = False) -> FlowCounts:
        """Runnable and running jobs by queue, every tenant's (cached ``flow_cache_seconds``)."""
        if fresh or time.monotonic() - self._counts_read_at > self._settings.flow_cache_seconds:
            counts = await self._shared_read("counts", self._store.flow_counts, fresh)
            if counts is not self._counts:  # a caller that shared the read has set (and added to) it already
                self._counts = counts
                self._counts_read_at = time.monotonic()
        return self._counts

    async def _shared_read(self, kind: str, read: Callable[[], Coroutine[Any, Any, T]], fresh: bool) -> T:
        """``read()``, or the same read already in flight on this event loop (never for ``fresh``: it must
        begin after the call). Shielded: one caller's cancellation leaves the others their answer."""
        loop = asyncio.get_running_loop()
        task = self._reading.get(kind)
        if fresh or task is None or task.done() or task.get_loop() is not loop:
            task = self._reading[kind] = loop.create_task(read())
        result: T = await asyncio.shield(task)
        return result

    def _depth_limits(self, limits: dict[str, FlowLimits], queue: str) -> tuple[int | None, int | None]:
        lim = limits.get(queue)
        s = self._settings
        soft = lim.soft_limit if lim is not None and lim.soft_limit is not None else s.flow_soft_limit
        hard = lim.hard_limit if lim is not None and lim.hard_limit is not None else s.flow_hard_limit
        return soft or None, hard or None

    def _latency_p95(self) -> float:
        waits = [s[1] for w in self._windows.values() for s in w.samples]
        return percentile(waits, 0.95)

    async def load_state(self) -> LoadState:
        """Saturated or not, and why (thresholds: the ``shed_*`` settings)."""
        if not self._policy.enabled:
            return LoadState(Load.NORMAL)
        counts = await self.counts()
        state = load_state(self._policy, depth=sum(counts.depth.values()), in_flight=sum(counts.running.values()),
                           latency=self._latency_p95())  # fmt: skip
        self._load = state
        return state

    async def admit(self, jobs: Sequence[NewJob]) -> None:
        """Decide whether new ``jobs`` may be written: raises Overloaded (a job below the shedding priority
        while saturated) or QueueFull (a queue past its hard limit); records their arrival either way."""
        self.arrived([j.queue for j in jobs])
        limits = await self.limits()
        policy = self._policy
        watched = policy.enabled or self._settings.flow_soft_limit or self._settings.flow_hard_limit
        if not watched and not any(
            (lim.soft_limit or lim.hard_limit) for q in {j.queue for j in jobs} if (lim := limits.get(q))
        ):
            return
        if policy.enabled:
            load = await self.load_state()
            low = next((j for j in jobs if not admits(policy, load, j.priority)), None)
            if low is not None:
                self._refused[(low.queue, "shed")] += 1
                raise Overloaded(low.queue, low.priority, policy.min_priority, load.reasons, policy.retry_after)
        counts = await self.counts()
        adding = Counter(j.queue for j in jobs)
        levels: dict[str, Pressure] = {}
        for queue, n in adding.items():
            soft, hard = self._depth_limits(limits, queue)
            depth = counts.depth.get(queue, 0)
            level = pressure(depth, n, soft, hard)
            if level is Pressure.HARD:
                self._refused[(queue, "hard_limit")] += 1
                raise QueueFull(queue, depth, hard or 0, self._settings.flow_retry_after)
            levels[queue] = level
        for queue, level in levels.items():
            if level is Pressure.SOFT:
                self._soft[queue] += 1
        # Count what this process adds until the next read, so a burst sees its own writes.
        for queue, n in adding.items():
            counts.depth[queue] = counts.depth.get(queue, 0) + n

    async def pressure(self, queue: str) -> Pressure:
        """The queue's state now: ``hard`` once full (the next enqueue would be refused), ``soft`` past the
        soft limit, else ``none``."""
        soft, hard = self._depth_limits(await self.limits(), queue)
        depth = (await self.counts()).depth.get(queue, 0)
        if hard is not None and depth >= hard:
            return Pressure.HARD
        return pressure(depth, 0, soft, None)

    # -- observation --------------------------------------------------------------------------------
    def observe(self, jobs: Sequence[Job]) -> None:
        """Finished attempts (succeeded, failed, dead): the scale window and adaptive limiters learn them."""
        now = self._clock.now()
        for j in jobs:
            if j.state not in (JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD) or j.started_at is None:
                continue
            ok = j.state is JobState.SUCCEEDED
            run = max(0.0, now - j.started_at)
            wait = max(0.0, j.started_at - j.run_at)
            self._window(j.queue).add(now, wait, run, ok)
            aimd = self._aimd.get(j.queue)
            if aimd is not None:
                aimd.observe(ok=ok, latency=run, now=now)

    def arrived(self, queues: Sequence[str]) -> None:
        """Jobs offered to ``queues`` (one entry per job): the scale window's arrival rate."""
        now = self._clock.now()
        for queue, n in Counter(queues).items():
            self._window(queue).arrived(now, n)

    def _window(self, queue: str) -> Window:
        window = self._windows.get(queue)
        if window is None:
            window = self._windows[queue] = Window(SCALE_WINDOW)
        return window

    async def scale(self, queue: str) -> ScaleReport:
        """Depth, throughput, latency percentiles and the recommended worker slots for ``queue``."""
        check_name("queue", queue)
        counts = await self.counts(fresh=True)
        window = self._windows.get(queue) or Window(SCALE_WINDOW)
        return report(queue, window, self._clock.now(), depth=counts.depth.get(queue, 0),
                      running=counts.running.get(queue, 0), target=self._settings.scale_target_seconds)  # fmt: skip

    async def scale_all(self) -> list[ScaleReport]:
        """:meth:`scale` of every queue with jobs or recent activity, by name."""
        counts = await self.counts(fresh=True)
        names = sorted(set(counts.depth) | set(counts.running) | set(self._windows))
        now = self._clock.now()
        return [
            report(q, self._windows.get(q) or Window(SCALE_WINDOW), now, depth=counts.depth.get(q, 0),
                   running=counts.running.get(q, 0), target=self._settings.scale_target_seconds)
            for q in names
        ]  # fmt: skip

    def snapshot(self) -> dict[str, Any]:
        """For metrics: adaptive rates, refusals, soft-pressure counts, the last load state."""
        return {
            "adaptive": {q: a.rate for q, a in self._aimd.items()},
            "refused": dict(self._refused),
            "soft": dict(self._soft),
            "load": self._load,
        }
