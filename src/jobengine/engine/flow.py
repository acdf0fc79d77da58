"""The flow-control part of the Engine facade (mixed into :class:`~jobengine.engine.Engine`): limited
claims, admission of new work (backpressure, load shedding), the adaptive limiter and scale metrics.

- **Limits** come from the ``flow_limits`` setting and from the store (``FlowStore``: set through the API,
  shared by every process); a queue's stored limits replace its configured ones. Read with the queue
  settings' cache time (``flow_cache_seconds``); a change made in this process applies at once.
- **Claims**: a queue with a concurrency limit (its queue setting) or flow limits is claimed alone through
  ``FlowStore.claim_limited``, which decides inside the store's claim transaction (exact across
  processes); other queues are claimed together as before. Over a broker, the worker's source claims a
  limited queue's deliveries the same way, restricted to their ids (``ClaimRule.ids``, delivery/source.py).
- **Admission** (:meth:`admit`, called by ``enqueue_many`` before anything is written): depth and load are
  read from ``FlowStore.flow_counts`` (cached ``flow_cache_seconds``, so concurrent producers may pass a
  hard limit by what they enqueue within that time).
- **Signals kept in this process**: the adaptive limiter's rate and the scale window (wait and run times
  of the jobs this engine's workers, or the remote workers it serves, finished). Another process's
  workers are not seen; the p95 wait that load shedding watches is this process's view.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from jobengine.core.flow.aimd import Aimd
from jobengine.core.flow.config import parse_flow_limits
from jobengine.core.flow.limits import FlowLimits
from jobengine.core.flow.pressure import Load, LoadState, Pressure, ShedPolicy, admits, load_state, pressure
from jobengine.core.flow.scale import ScaleReport, Window, percentile, report
from jobengine.core.flow.select import ClaimRule
from jobengine.core.ids import WorkerId
from jobengine.core.models import Changed, Job, NewJob, check_name
from jobengine.core.states import RUNNABLE, JobState
from jobengine.errors import ConfigError, InvalidJob, Overloaded, QueueFull
from jobengine.ports.flow import FlowCounts, FlowStore
from jobengine.ports.store import supports
from jobengine.settings import shed_policy

if TYPE_CHECKING:
    from jobengine.core.clock import Clock
    from jobengine.ports.notifier import Notifier
    from jobengine.ports.queues import QueueSettings
    from jobengine.ports.store import Store
    from jobengine.settings import Settings

#: Seconds of finished jobs the scale window keeps (throughput, percentiles).
SCALE_WINDOW = 60.0
#: Seconds between two judgements of an adaptive limiter.
AIMD_INTERVAL = 5.0


@dataclass
class _FlowRuntime:
    configured: dict[str, FlowLimits]
    stored: dict[str, FlowLimits] = field(default_factory=dict)
    stored_read_at: float = -1e18
    counts: FlowCounts = field(default_factory=FlowCounts)
    counts_read_at: float = -1e18
    aimd: dict[str, Aimd] = field(default_factory=dict)
    windows: dict[str, Window] = field(default_factory=dict)
    refused: Counter[tuple[str, str]] = field(default_factory=Counter)  # (queue, reason) → enqueues refused
    soft: Counter[str] = field(default_factory=Counter)  # queue → enqueues accepted under soft pressure
    load: LoadState = field(default_factory=lambda: LoadState(Load.NORMAL))
    #: shed_policy(settings), built once: settings do not change under a running engine.
    policy: ShedPolicy | None = None
    #: queue → when this process last took a token of its rate limit (the claim's time)
    took: dict[str, float] = field(default_factory=dict)


class FlowFacade:
    # Provided by Engine.
    store: Store
    settings: Settings
    clock: Clock
    _flow_runtime: _FlowRuntime | None = None

    if TYPE_CHECKING:

        def notifier(self) -> Notifier: ...

        async def queue_settings(self, *, fresh: bool = False) -> dict[str, QueueSettings]: ...

        async def count_jobs(self, tenant: str | None = None) -> dict[tuple[str, JobState], int]: ...

    def _flow(self) -> _FlowRuntime:
        if self._flow_runtime is None:
            self._flow_runtime = _FlowRuntime(
                parse_flow_limits(self.settings.flow_limits),
                policy=shed_policy(self.settings),
            )
        return self._flow_runtime

    def _flow_store(self) -> FlowStore:
        if not isinstance(self.store, FlowStore):
            raise ConfigError("flow limits: this store does not support flow control")
        return self.store

    # -- limits -------------------------------------------------------------------------------------
    async def flow_limits(self, *, fresh: bool = False) -> dict[str, FlowLimits]:
        """Limits by queue: configured ones, replaced by stored ones (cached ``flow_cache_seconds``)."""
        rt = self._flow()
        if supports(self.store, FlowStore):
            ttl = max(self.settings.flow_cache_seconds, 0.0)
            if fresh or time.monotonic() - rt.stored_read_at > ttl:
                rt.stored = {lim.queue: lim for lim in await cast(FlowStore, self.store).list_flow_limits()}
                rt.stored_read_at = time.monotonic()
        return {**rt.configured, **rt.stored}

    async def set_flow_limits(self, queue: str, **fields: Any) -> FlowLimits:
        """Replace the queue's flow limits with ``fields`` (FlowLimits fields; InvalidJob names a bad one).
        Queues are shared lanes: an operator's action."""
        check_name("queue", queue)
        unknown = sorted(set(fields) - set(FlowLimits.__dataclass_fields__) - {"queue", "updated_at"})
        if unknown:
            raise InvalidJob(unknown[0], "is not a flow limit")
        limits = FlowLimits(queue=queue, updated_at=self.clock.now(), **fields)
        await self._flow_store().set_flow_limits(limits)
        rt = self._flow()
        rt.stored[queue] = limits
        rt.aimd.pop(queue, None)
        self.notifier().notify()
        return limits

    async def clear_flow_limits(self, queue: str) -> None:
        check_name("queue", queue)
        await self._flow_store().delete_flow_limits(queue)
        self._flow().stored.pop(queue, None)
        self._flow().aimd.pop(queue, None)
        self.notifier().notify()

    def flow_rate(self, limits: FlowLimits) -> float | None:
        """The rate a claim of the queue uses now: the adaptive limiter's, else the configured one."""
        if not limits.adaptive or limits.rate is None:
            return limits.rate
        return self._aimd(limits).update(self.clock.now())

    def _aimd(self, limits: FlowLimits) -> Aimd:
        rt = self._flow()
        aimd = rt.aimd.get(limits.queue)
        if aimd is None:
            rate = limits.rate or 1.0
            floor = limits.rate_floor if limits.rate_floor is not None else rate
            ceiling = limits.rate_ceiling if limits.rate_ceiling is not None else rate
            aimd = Aimd(rate, floor, ceiling, increase=max(floor, ceiling / 20), interval=AIMD_INTERVAL,
                        target_error_rate=limits.target_error_rate, target_latency=limits.target_latency)  # fmt: skip
            rt.aimd[limits.queue] = aimd
        return aimd

    # -- claims -------------------------------------------------------------------------------------
    async def flow_claim_plan(self, queues: Sequence[str], limit: int) -> list[tuple[list[str], int, ClaimRule | None]]:
        """Paused queues are left out; queues with a concurrency setting or flow limits get a claim each,
        under their rule; the rest are claimed together."""
        settings = await self.queue_settings()
        limits = await self.flow_limits()
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
                ruled.append(([q], limit, ClaimRule(q, cap, lim, self.flow_rate(lim) if lim else None)))
        if ruled and not supports(self.store, FlowStore):
            raise ConfigError("queue limits: this store does not support flow control")
        return ([(plain, limit, None)] if plain else []) + ruled

    async def claim_limited(
        self,
        rule: ClaimRule,
        limit: int,
        worker: WorkerId,
        lease_seconds: float,
        now: float,
        *,
        tasks: Sequence[str] | None = None,
        tenant: str | None = None,
    ) -> Changed:
        rule = replace(rule, tasks=tuple(tasks) if tasks is not None else None, tenant=tenant)
        changed = await self._flow_store().claim_limited(rule, limit, worker, lease_seconds, now)
        if rule.rate and changed.jobs:
            self._flow().took[rule.queue] = now
        return changed

    async def flow_next_run_at(self, queues: Sequence[str], tasks: Sequence[str] | None = None) -> float | None:
        """When a worker with nothing claimed should look again: the store's next run_at among queues
        claimed without a rule (jobs of ``tasks`` only, when given); for a rate-limited queue, when its next
        token may be there. (A queue held by a concurrency limit waits for the notifier or the poll
        interval.)"""
        plan = await self.flow_claim_plan(queues, 1)
        plain = [q for group, _, rule in plan if rule is None for q in group]
        nxt = await self.store.next_run_at(plain, tasks) if plain else None
        now = self.clock.now()
        for _, _, rule in plan:
            if rule is not None and rule.rate:
                token = self.flow_token_at(rule.queue, rule.rate, now)
                nxt = token if nxt is None else min(nxt, token)
        return nxt

    def flow_token_at(self, queue: str, rate: float, now: float) -> float:
        """When the next token of ``queue``'s rate limit may be there: one interval after the last token
        this process took (the claim's time, not its answer's), else one interval (at most 1 s) from now.
        Another process's claim may take it first, which costs one empty claim."""
        token = now + min(1.0 / rate, 1.0)
        last = self._flow().took.get(queue)
        if last is not None and last + 1.0 / rate > now - 1.0:
            token = max(now, min(token, last + 1.0 / rate))
        return token

    # -- admission ----------------------------------------------------------------------------------
    async def flow_counts(self, *, fresh: bool = False) -> FlowCounts:
        rt = self._flow()
        if not isinstance(self.store, FlowStore):
            return rt.counts
        if fresh or time.monotonic() - rt.counts_read_at > self.settings.flow_cache_seconds:
            rt.counts = await self.store.flow_counts()
            rt.counts_read_at = time.monotonic()
        return rt.counts

    async def queue_depth(self, queue: str, tenant: str | None = None) -> int:
        """Runnable jobs of ``queue``: every tenant's (what admission counts) when ``tenant`` is None, else
        only ``tenant``'s — a tenant's caller must not learn how much work other tenants have queued."""
        if tenant is None:
            return (await self.flow_counts(fresh=True)).depth.get(queue, 0)
        counts = await self.count_jobs(tenant)
        return sum(counts.get((queue, s), 0) for s in RUNNABLE)

    def _depth_limits(self, limits: dict[str, FlowLimits], queue: str) -> tuple[int | None, int | None]:
        lim = limits.get(queue)
        soft = lim.soft_limit if lim is not None and lim.soft_limit is not None else self.settings.flow_soft_limit
        hard = lim.hard_limit if lim is not None and lim.hard_limit is not None else self.settings.flow_hard_limit
        return soft or None, hard or None

    def _latency_p95(self) -> float:
        waits = [s[1] for w in self._flow().windows.values() for s in w.samples]
        return percentile(waits, 0.95)

    async def load_state(self) -> LoadState:
        """Saturated or not, and why (thresholds: the ``shed_*`` settings)."""
        policy = shed_policy(self.settings)
        if not policy.enabled:
            return LoadState(Load.NORMAL)
        counts = await self.flow_counts()
        state = load_state(policy, depth=sum(counts.depth.values()), in_flight=sum(counts.running.values()),
                           latency=self._latency_p95())  # fmt: skip
        self._flow().load = state
        return state

    async def admit(self, jobs: Sequence[NewJob]) -> dict[str, Pressure]:
        """Decide whether new ``jobs`` may be written: raises Overloaded (a job below the shedding priority
        while saturated) or QueueFull (a queue past its hard limit), else the pressure per queue."""
        rt = self._flow()
        self.flow_arrived([j.queue for j in jobs])
        limits = await self.flow_limits()
        policy = rt.policy
        assert policy is not None
        watched = policy.enabled or self.settings.flow_soft_limit or self.settings.flow_hard_limit
        if not watched and not any(
            (lim.soft_limit or lim.hard_limit) for q in {j.queue for j in jobs} if (lim := limits.get(q))
        ):
            return {}
        if policy.enabled:
            load = await self.load_state()
            low = next((j for j in jobs if not admits(policy, load, j.priority)), None)
            if low is not None:
                rt.refused[(low.queue, "shed")] += 1
                raise Overloaded(low.queue, low.priority, policy.min_priority, load.reasons, policy.retry_after)
        counts = await self.flow_counts()
        adding = Counter(j.queue for j in jobs)
        out: dict[str, Pressure] = {}
        for queue, n in adding.items():
            soft, hard = self._depth_limits(limits, queue)
            depth = counts.depth.get(queue, 0)
            level = pressure(depth, n, soft, hard)
            if level is Pressure.HARD:
                rt.refused[(queue, "hard_limit")] += 1
                raise QueueFull(queue, depth, hard or 0, self.settings.flow_retry_after)
            out[queue] = level
        for queue, level in out.items():
            if level is Pressure.SOFT:
                rt.soft[queue] += 1
        # Count what this process adds until the next read, so a burst sees its own writes.
        for queue, n in adding.items():
            counts.depth[queue] = counts.depth.get(queue, 0) + n
        return out

    async def queue_pressure(self, queue: str) -> Pressure:
        """The queue's state now: ``hard`` once full (the next enqueue would be refused), ``soft`` past the
        soft limit, else ``none``."""
        soft, hard = self._depth_limits(await self.flow_limits(), queue)
        depth = (await self.flow_counts()).depth.get(queue, 0)
        if hard is not None and depth >= hard:
            return Pressure.HARD
        return pressure(depth, 0, soft, None)

    # -- observation --------------------------------------------------------------------------------
    def flow_observe(self, jobs: Sequence[Job]) -> None:
        """Finished attempts (succeeded, failed, dead): the scale window and adaptive limiters learn them."""
        rt = self._flow()
        now = self.clock.now()
        for j in jobs:
            if j.state not in (JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD) or j.started_at is None:
                continue
            ok = j.state is JobState.SUCCEEDED
            run = max(0.0, now - j.started_at)
            wait = max(0.0, j.started_at - j.run_at)
            window = rt.windows.get(j.queue)
            if window is None:
                window = rt.windows[j.queue] = Window(SCALE_WINDOW)
            window.add(now, wait, run, ok)
            aimd = rt.aimd.get(j.queue)
            if aimd is not None:
                aimd.observe(ok=ok, latency=run, now=now)

    def flow_arrived(self, queues: Sequence[str]) -> None:
        rt = self._flow()
        now = self.clock.now()
        for queue, n in Counter(queues).items():
            window = rt.windows.get(queue)
            if window is None:
                window = rt.windows[queue] = Window(SCALE_WINDOW)
            window.arrived(now, n)

    async def scale(self, queue: str) -> ScaleReport:
        """Depth, throughput, latency percentiles and the recommended worker slots for ``queue``."""
        check_name("queue", queue)
        counts = await self.flow_counts(fresh=True)
        window = self._flow().windows.get(queue) or Window(SCALE_WINDOW)
        return report(queue, window, self.clock.now(), depth=counts.depth.get(queue, 0),
                      running=counts.running.get(queue, 0), target=self.settings.scale_target_seconds)  # fmt: skip

    async def scale_all(self) -> list[ScaleReport]:
        counts = await self.flow_counts(fresh=True)
        names = sorted(set(counts.depth) | set(counts.running) | set(self._flow().windows))
        now = self.clock.now()
        return [
            report(q, self._flow().windows.get(q) or Window(SCALE_WINDOW), now, depth=counts.depth.get(q, 0),
                   running=counts.running.get(q, 0), target=self.settings.scale_target_seconds)
            for q in names
        ]  # fmt: skip

    def flow_snapshot(self) -> dict[str, Any]:
        """For metrics: adaptive rates, refusals, soft-pressure counts, the last load state."""
        rt = self._flow()
        return {
            "adaptive": {q: a.rate for q, a in rt.aimd.items()},
            "refused": dict(rt.refused),
            "soft": dict(rt.soft),
            "load": rt.load,
        }
