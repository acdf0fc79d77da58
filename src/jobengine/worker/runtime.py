"""The worker: a pump claims runnable jobs into a concurrency-limited pool, heartbeats extend their leases,
outcomes are batched to the store, and a rescuer returns the jobs of dead workers.

Failure policy:
- an exception in a task is a failed attempt: retried with the task's backoff until ``max_attempts``,
  then ``dead``; ``NonRetryable`` goes to ``dead`` at once; a timeout is a failed attempt;
- a lost lease (another worker owns the job now) stops the task and reports nothing;
- a cancel request sets ``ctx.cancelled`` (and cancels an async task at its next ``await``);
- stop(): stop claiming, let in-flight jobs finish within the grace period, then release the rest back to
  ``queued`` without spending an attempt; a second stop() releases at once;
- middleware (:mod:`jobengine.middleware`) sees every attempt that began, after its outcome was recorded:
  a hook cannot change or lose it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import logging
import os
import socket
import traceback
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from jobengine.core.bounds import check_json, storable
from jobengine.core.ids import JobId, LeaseToken, WorkerId
from jobengine.core.models import (
    AttemptError,
    Completion,
    FailOutcome,
    Failure,
    Job,
    Json,
    Lease,
    Phase,
    PhaseState,
    PhaseUpdate,
    overall_progress,
)
from jobengine.errors import Cancelled, NonRetryable, TaskTimeout, UnknownTask
from jobengine.fleet import local_worker
from jobengine.middleware import Middleware, MiddlewareChain
from jobengine.tasks import PhaseSpec, TaskSpec
from jobengine.worker import joblog
from jobengine.worker.context import JobContext, SharedState, SyncJobContext
from jobengine.worker.prefetch import Prefetch
from jobengine.worker.source import WorkerSource

if TYPE_CHECKING:  # prometheus_client only where metrics are kept
    from jobengine.worker.metrics import WorkerObserver

log = logging.getLogger("jobengine.worker")


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    queues: tuple[str, ...] = ()  # empty: every queue the registered tasks use, plus "default"
    concurrency: int = 50
    lease_seconds: float = 30.0
    heartbeat_every: float = 10.0
    progress_every: float = 0.5
    poll_interval: float = 1.0
    rescue_interval: float = 5.0
    grace_period: float = 30.0
    fetch_batch: int = 0  # 0: as many as there are free slots (and the prefetch buffer's room)
    #: Jobs claimed beyond the free slots, held in a buffer and started as slots free up, so short jobs are
    #: claimed in batches larger than ``concurrency``: at most this many, and only as many as the worker expects
    #: to start within ``prefetch_seconds`` (:mod:`jobengine.worker.prefetch`). 0: claim only free slots.
    #: The setting ``worker_prefetch``.
    prefetch: int = 500
    prefetch_seconds: float = 0.05
    worker_id: str | None = None
    #: Tune this process's garbage collector when the worker starts (see :func:`tune_gc`).
    tune_gc: bool = True
    #: Outcomes (completions, failures, releases) are flushed at most once per this many seconds, each flush
    #: a commit (docs/decisions/0004-worker-outcome-flush-spacing.md); not waited out with FLUSH_EARLY
    #: outcomes waiting or a job others depend on. 0: after every loop turn. The setting ``worker_flush_spacing``.
    flush_spacing: float = 0.05
    #: How often the worker looks for dead workers, whose jobs then run again at once (the setting
    #: ``liveness_interval``; :mod:`jobengine.ports.workers`).
    liveness_interval: float = 0.5
    #: The packs this worker loaded (``name@version``), as the registry of live workers shows them.
    packs: tuple[str, ...] = ()
    #: What the worker runs on, for its start-up lines: ``(label, value)`` pairs such as
    #: ``("store", "postgres postgresql://app:***@db/jobs (schema jobengine)")``, secrets redacted.
    setup: tuple[tuple[str, str], ...] = ()
    #: Told of claims and lease extensions, and (a middleware, after the job log) of each attempt's start and
    #: end (:class:`~jobengine.worker.metrics.WorkerMetrics` keeps Prometheus metrics of them); None: nobody is.
    observer: WorkerObserver | None = None


class _LeaseLost(Exception):
    pass


#: A busy worker does not wait out ``flush_spacing``: this many outcomes waiting are flushed at once.
FLUSH_EARLY = 64

#: Seconds between cancellations of a task that runs on after being cancelled (see :func:`_halt`).
HALT_AGAIN = 0.1

#: Seconds an answer of ``next_run_at`` serves the pump's waits after empty claims. Every commit of a runnable
#: job wakes every idle worker, and asking again after each wake-up would double the round trips of a
#: worker at low rates. What the answer can miss meanwhile is a job made due later (scheduled, or a retry after a
#: delay): no notification announces one, so an idle worker learns of it at its poll anyway.
DUE_FRESH = 0.1


async def _halt(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Cancel ``tasks`` and return once each has ended, cancelling again any that runs on.

    One cancellation is not enough: it can be lost on its way, where an awaitable finishes at the moment its
    awaiter is cancelled (Python 3.11's ``asyncio.wait_for`` then returns the result and drops the
    cancellation; a driver or broker client may do the same). A loop that lost its only cancellation runs
    on: the pump would claim jobs after the stop, and the worker would wait for it forever."""
    pending = {t for t in tasks if not t.done()}
    while pending:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=HALT_AGAIN)


def tune_gc() -> None:
    """Once per process, as a worker (or ``jobengine serve``) starts: ``gc.freeze()`` what exists by then
    (long-lived, not garbage), so the collector's full passes stop re-scanning it, and collect the youngest
    generation after 7,000 allocations instead of 700 if nobody changed the default
    (docs/decisions/0009-worker-gc-tuning.md).
    ``tune_gc=False`` keeps the interpreter's settings; so does a process that froze objects itself."""
    if not gc.isenabled() or gc.get_freeze_count():
        return
    gc.freeze()
    if gc.get_threshold() == (700, 10, 10):
        gc.set_threshold(7000, 10, 10)


class _Running:
    __slots__ = (
        "began", "error", "in_thread", "lease", "outcome", "result", "retry_at", "seconds", "shared", "stop_reason",
        "task",
    )  # fmt: skip

    def __init__(self, job: Job, shared: SharedState) -> None:
        assert job.lease_token is not None
        self.lease = Lease(job.id, job.lease_token)
        self.shared = shared
        self.task: asyncio.Task[None] | None = None
        self.stop_reason: str | None = None  # lease_lost | cancel | shutdown
        self.in_thread = False
        self.began = 0.0  # the loop's time when the job started, for its end line
        # The attempt's outcome (a key of joblog.OUTCOMES) and what the middleware is told of it.
        self.outcome: str | None = None
        self.error: BaseException | None = None
        self.result: Json = None
        self.retry_at = 0.0
        self.seconds = 0.0


def _error(job: Job, exc: BaseException, worker: str, now: float) -> AttemptError:
    # What a task raised is recorded, not refused: text no backend stores becomes U+FFFD.
    message = storable((str(exc) or type(exc).__name__)[:2000])
    trace = storable("".join(traceback.format_exception(exc))[-8000:])
    return AttemptError(job.attempt, now, storable(type(exc).__name__), message, trace, worker)


class Worker:
    """Runs the jobs of ``source`` (the engine's worker protocol) with ``options``; ``middleware``: the
    hooks around each attempt (:mod:`jobengine.middleware`), after the worker's own job lines. Build one with
    ``engine.worker()``, which passes the engine's middleware. Usage::

        worker = engine.worker(concurrency=4)
        await worker.run()                 # until worker.stop()
    """

    def __init__(
        self, source: WorkerSource, options: WorkerOptions | None = None, middleware: Iterable[Middleware] = ()
    ) -> None:
        self.source = source
        self.middleware = middleware
        self.options = opts = options or WorkerOptions()
        self.id = WorkerId(opts.worker_id or f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}")
        self.queues: tuple[str, ...] = opts.queues or tuple(source.tasks.queues())
        self._inflight: dict[JobId, _Running] = {}
        self._buffer = Prefetch(opts.prefetch, opts.prefetch_seconds, opts.concurrency)
        self._dry = False  # the last claim got fewer jobs than it asked for: no claiming ahead meanwhile
        self._due: tuple[float, float | None] | None = None  # (loop time read, next_run_at's answer)
        self._completions: list[Completion] = []
        self._failures: list[Failure] = []
        self._releases: list[Lease] = []
        self._executor = ThreadPoolExecutor(opts.concurrency, thread_name_prefix="jobengine-task")
        self._stop_requests = 0
        self._stop: asyncio.Event | None = None
        self._hard: asyncio.Event | None = None
        self._slot_free: asyncio.Event | None = None
        self._flush_wanted: asyncio.Event | None = None
        self._closing = False  # run() is ending: the flusher finishes its batch and returns
        # A job with dependents (or that added graph nodes) finished: flush without waiting out the spacing.
        self._dependents_wait = False
        self._tasks: tuple[str, ...] = ()  # what this worker runs, and so claims (read at run())
        self._registered = False
        self._registering: asyncio.Future[None] | None = None
        self._hooks = MiddlewareChain([joblog.JobLog()])  # with the app's middleware from run() on
        self.processed = 0

    # -- lifecycle ----------------------------------------------------------------------------------
    def stop(self) -> None:
        """First call: graceful (finish within the grace period, release the rest); second: release now."""
        self._stop_requests += 1
        if self._stop is not None:
            self._stop.set()
            if self._stop_requests > 1 and self._hard is not None:
                self._hard.set()

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    async def run(self) -> None:
        """Run until :meth:`stop`; returns when every claimed job finished or was released."""
        if self.options.tune_gc:
            tune_gc()
        self._stop, self._hard = asyncio.Event(), asyncio.Event()
        self._slot_free, self._flush_wanted = asyncio.Event(), asyncio.Event()
        if self._stop_requests:  # stop() came before run(): the loops below must see it
            self._stop.set()
            if self._stop_requests > 1:
                self._hard.set()
        self._tasks = tuple(self.source.tasks.names())
        observed = [] if self.options.observer is None else [self.options.observer]
        self._hooks = MiddlewareChain([joblog.JobLog(), *observed, *self.middleware])
        # Registered while the first claim goes out: until its row exists no other worker can declare this
        # one dead (only registered workers are judged), and its jobs are protected by their leases meanwhile.
        self._registering = registering = asyncio.create_task(self._register(), name="jobengine-register")
        opts = self.options
        joblog.start_block(self.id, self.queues, opts.setup, opts.concurrency, self._tasks, opts.packs)
        pump = asyncio.create_task(self._pump(), name="jobengine-pump")
        helpers = [
            asyncio.create_task(self._heartbeat_loop(), name="jobengine-heartbeat"),
            asyncio.create_task(self._progress_loop(), name="jobengine-progress"),
            asyncio.create_task(self._rescue_loop(), name="jobengine-rescuer"),
            asyncio.create_task(self._flush_loop(), name="jobengine-flusher"),
        ]
        try:
            await self._stop.wait()
            await _halt([pump])
            # Claimed ahead, never started: back to the queue without spending an attempt (the final flush).
            self._releases.extend(leases_of(self._buffer.drain()))
            await self._drain()
        finally:
            *others, flusher = helpers
            # The flusher is not cancelled but told to finish: cancelled while a report is in the store's
            # hands, the report may still be applied while its events never reach the bus.
            self._closing = True
            self._flush_wanted.set()
            await _halt([pump, *others])
            await asyncio.gather(flusher, return_exceptions=True)
            await self._flush(final=True)  # whatever is left, if the flusher gave up
            self._executor.shutdown(wait=False, cancel_futures=True)
            await asyncio.gather(registering, return_exceptions=True)  # so that its row is removed too
            await self._unregister()
            log.info("worker %s stopped", self.id)

    async def _register(self) -> None:
        """Enter this worker in the registry of live workers. A failure (the store is away) is logged: the
        worker runs all the same, its jobs protected by their leases, and the next beat registers it."""
        info = local_worker(
            self.id, self.queues, self._tasks, concurrency=self.options.concurrency, packs=self.options.packs
        )
        try:
            await self.source.register_worker(info)
            self._registered = True
        except Exception:
            log.exception("registering worker %s failed; will retry", self.id)

    async def _unregister(self) -> None:
        if not self._registered:
            return
        try:
            await self.source.unregister_worker(self.id)
        except Exception as exc:  # its row expires, or its liveness shows it gone
            log.warning("unregistering worker %s failed (%s)", self.id, exc)

    async def _beat(self) -> None:
        """Tell the registry this worker lives. Told it was declared dead (its liveness was lost for a
        while), it registers again and checks its leases at once: those were taken, and the jobs run
        elsewhere now, so they stop here."""
        if self._registering is not None and not self._registering.done():
            return  # the first registration is still on its way
        if not self._registered:
            await self._register()
            return
        if await self.source.beat_worker(self.id):
            return
        log.warning("worker %s was declared dead; registering again and dropping jobs whose lease is gone", self.id)
        self._registered = False
        await self._register()
        await self._heartbeat()

    async def _drain(self) -> None:
        assert self._hard is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.grace_period
        hard = asyncio.create_task(self._hard.wait())
        try:
            while not hard.done():
                running = {r.task for r in self._inflight.values() if r.task is not None and not r.task.done()}
                remaining = deadline - loop.time()
                if not running or remaining <= 0:
                    break
                log.info("waiting up to %.0fs for %d jobs in flight", remaining, len(running))
                await asyncio.wait([*running, hard], timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hard.cancel()
        for run in list(self._inflight.values()):
            run.stop_reason = "shutdown"
            run.shared.cancel.set()
        await _halt([r.task for r in list(self._inflight.values()) if r.task is not None])

    # -- the pump -----------------------------------------------------------------------------------
    async def _pump(self) -> None:
        """Claim and start jobs until the stop. The stop cancels this task (see :func:`_halt`), and the loop
        also looks at the stop itself before each claim and after it: a cancellation that went missing, or a
        stop that came while the claim was in the store's hands, must not start another job."""
        assert self._slot_free is not None and self._stop is not None
        notifier = self.source.notifier()
        opts = self.options
        failures = 0
        loop = asyncio.get_running_loop()
        buffer = self._buffer
        while not self._stop.is_set():
            free = opts.concurrency - len(self._inflight)
            ahead = self._ahead()
            if free <= 0 and ahead <= 0:
                self._slot_free.clear()
                await self._wait_for_slot()
                continue
            limit = max(free, 0) + ahead
            if opts.fetch_batch:
                limit = min(limit, opts.fetch_batch)
            try:
                jobs = await self._fetch(limit)
                failures = 0
            except Exception:
                failures += 1
                log.exception("fetching jobs failed; retrying")
                await asyncio.sleep(min(5.0, 0.05 * 2**failures))
                continue
            if self._stop.is_set():
                self._releases.extend(leases_of(jobs))  # no attempt spent: released by the final flush
                return
            self._dry = len(jobs) < limit
            # Slots freed while the claim was out: oldest first, the buffer's jobs before the new ones.
            buffer.put(jobs, loop.time())
            while len(self._inflight) < opts.concurrency and (job := buffer.take()) is not None:
                self._start(job)
            if self._dry and not buffer:
                timeout = opts.poll_interval
                # Also after a claim that got some jobs: a rate limit may have held the rest back, and
                # nothing wakes the worker when the bucket's next token is due but this answer.
                nxt = await self._next_due(loop.time())
                if nxt is not None:
                    timeout = max(0.0, min(timeout, nxt - self.source.clock.now()))
                if timeout > 0:
                    try:
                        await notifier.wait(timeout)
                    except Exception:  # a notifier must not raise; if one does, the pump polls on
                        log.exception("waiting for work failed; polling")
                        await asyncio.sleep(min(timeout, 0.5))

    async def _next_due(self, now: float) -> float | None:
        """``next_run_at`` of the worker's queues, read again when :data:`DUE_FRESH` old or already due."""
        due = self._due
        if due is None or now - due[0] >= DUE_FRESH or (due[1] is not None and due[1] <= self.source.clock.now()):
            due = self._due = (now, await self.source.next_run_at(self.queues, self._tasks))
        return due[1]

    def _ahead(self) -> int:
        """How many jobs to claim beyond the free slots: none while the buffer holds more than half its target
        (it is refilled in larger claims, not one job at a time) or while the store had fewer than asked."""
        held = len(self._buffer)
        if self._dry and held:
            return 0
        target = self._buffer.target()
        return target - held if held <= target // 2 else 0

    async def _wait_for_slot(self) -> None:
        """Wait for a slot to free up; jobs that waited in the buffer for :data:`~jobengine.worker.prefetch.HOLD`
        meanwhile (every slot busy with longer jobs) go back to the queue, for other workers to start."""
        assert self._slot_free is not None
        loop = asyncio.get_running_loop()
        left = self._buffer.hold_left(loop.time())
        if left is None:
            await self._slot_free.wait()
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, left)):
                await self._slot_free.wait()
                return
        overdue = self._buffer.overdue(loop.time())
        if overdue:
            self._releases.extend(leases_of(overdue))
            assert self._flush_wanted is not None
            self._flush_wanted.set()

    async def _fetch(self, limit: int) -> list[Job]:
        """Claim jobs. Stopping cancels the pump, maybe while a claim is in the store's hands, and a store
        may still apply a claim whose caller went away (SQLite's does): those jobs would stay running with
        no worker until their lease expired, each losing an attempt. So the claim is awaited to its end
        and what it claimed is released (no attempt spent) before the cancellation goes on."""
        claim = asyncio.ensure_future(
            self.source.fetch_jobs(self.queues, limit, self.id, self.options.lease_seconds, tasks=self._tasks)
        )
        observer = self.options.observer
        began = asyncio.get_running_loop().time()
        try:
            jobs = await asyncio.shield(claim)
            if observer is not None:
                observer.claimed(len(jobs), asyncio.get_running_loop().time() - began)
            return jobs
        except asyncio.CancelledError:
            # Waited for without being cancelled itself, even when this task is cancelled again meanwhile
            # (asyncio.wait never cancels what it waits for).
            while not claim.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait([claim])
            if not claim.cancelled() and claim.exception() is None:
                self._releases.extend(leases_of(claim.result()))
            raise

    def _start(self, job: Job) -> None:
        shared = SharedState(job, self._persist, self.source.parent_results)
        run = _Running(job, shared)
        self._inflight[job.id] = run
        run.task = asyncio.create_task(self._execute(run), name=f"jobengine-job-{job.id}")

    # -- running one job ----------------------------------------------------------------------------
    async def _execute(self, run: _Running) -> None:
        job = run.shared.job
        try:
            if self._stop is not None and self._stop.is_set():
                # Claimed as the stop came (its signal handled between the claim and this first step): once a
                # worker is stopping no job begins on it, so this one goes back without spending an attempt.
                run.stop_reason = "shutdown"
                self._releases.append(run.lease)
                return
            await self._attempt(run)
            await self._after(run)
        finally:
            self._inflight.pop(job.id, None)
            self.processed += 1
            assert self._slot_free is not None and self._flush_wanted is not None
            self._flush_wanted.set()
            # The slot goes to the buffer's next job at once, without waiting for the pump (which may be out
            # claiming); the pump is woken when a slot stays free or the buffer wants refilling.
            buffer = self._buffer
            nxt = buffer.take() if self._stop is None or not self._stop.is_set() else None
            if nxt is not None:
                self._start(nxt)
            if nxt is None or len(buffer) <= buffer.target() // 2:
                self._slot_free.set()

    async def _attempt(self, run: _Running) -> None:
        """Run one attempt and record its outcome (in the batches the flusher reports, and on ``run``)."""
        job = run.shared.job
        spec = self.source.tasks.get(job.task)
        try:
            run.began = asyncio.get_running_loop().time()
            if (rest := self._hooks.call_now("before_run", job)) is not None:
                await rest
            if spec is None:
                raise UnknownTask(job.task)
            timeout = job.timeout or spec.timeout
            if timeout is None:  # no scope to enter and leave on every job when there is nothing to time
                result = check_json("result", await self._run_phases(spec, run))
            else:
                try:
                    async with asyncio.timeout(timeout) as cm:
                        result = check_json("result", await self._run_phases(spec, run))
                except TimeoutError as exc:
                    if cm.expired():
                        run.shared.cancel.set()
                        raise TaskTimeout(f"timed out after {timeout:g}s") from exc
                    raise
            if run.stop_reason != "lease_lost":
                self._completions.append(Completion(job.id, run.lease.token, result, tuple(run.shared.added)))
                run.result = result
                self._ended(run, "succeeded")
            else:
                self._ended(run, "lease_lost")
        except asyncio.CancelledError:
            if run.stop_reason == "cancel":
                self._fail(run, spec, Cancelled("cancelled"), FailOutcome.CANCELLED)
            elif run.stop_reason != "lease_lost":
                self._releases.append(run.lease)
                self._ended(run, "released")
            else:
                self._ended(run, "lease_lost")
        except _LeaseLost:
            self._ended(run, "lease_lost")
        except Cancelled as exc:
            self._fail(run, spec, exc, FailOutcome.CANCELLED)
        except NonRetryable as exc:
            self._fail(run, spec, exc, FailOutcome.DEAD)
        except Exception as exc:
            if run.stop_reason == "lease_lost":
                self._ended(run, "lease_lost")
            elif run.stop_reason == "cancel":
                self._fail(run, spec, exc, FailOutcome.CANCELLED)
            else:
                retry = job.attempt < job.max_attempts
                self._fail(run, spec, exc, FailOutcome.RETRY if retry else FailOutcome.DEAD)

    def _ended(self, run: _Running, outcome: str, error: BaseException | None = None) -> None:
        """Record the attempt's outcome, and have it reported without waiting for the attempt's hooks."""
        run.outcome, run.error = outcome, error
        run.seconds = asyncio.get_running_loop().time() - run.began
        self._buffer.ran(run.seconds)
        if run.shared.job.has_dependents or run.shared.added:
            self._dependents_wait = True
        assert self._flush_wanted is not None
        self._flush_wanted.set()

    def _fail(self, run: _Running, spec: TaskSpec | None, exc: BaseException, outcome: FailOutcome) -> None:
        job = run.shared.job
        now = self.source.clock.now()
        err = _error(job, exc, self.id, now)
        retry_at = None
        if outcome is FailOutcome.RETRY:
            delay = spec.retry.delay(job.attempt) if spec is not None else 1.0
            run.retry_at = retry_at = now + delay
        self._failures.append(Failure(job.id, run.lease.token, err, outcome, retry_at))
        self._ended(run, outcome.value, exc)

    async def _after(self, run: _Running) -> None:
        """The attempt's hooks, in the order of the middleware. Its outcome is already recorded, so a hook
        that raises (logged), hangs until a hard stop or is cancelled cannot change or lose it."""
        hooks, job, error, outcome = self._hooks, run.shared.job, run.error, run.outcome
        if outcome is None:
            return
        if outcome == "succeeded":
            if (rest := hooks.call_now("after_run", job, run.result)) is not None:
                await rest
        elif error is not None and outcome in ("retry", "dead"):
            await hooks.call("on_failure", job, error)
            if outcome == "retry":
                await hooks.call("on_retry", job, error, run.retry_at)
            else:
                await hooks.call("on_dead", job, error)
        if (rest := hooks.call_now("after_attempt", job, outcome, run.seconds, error)) is not None:
            await rest

    async def _run_phases(self, spec: TaskSpec, run: _Running) -> Json:
        s = run.shared
        if not spec.explicit_phases:
            if s.phases:  # an earlier attempt reported progress or saved a checkpoint
                s.phases[0] = replace(s.phases[0], state=PhaseState.RUNNING)
            return await self._call(spec.phases[0], run)
        stored = {p.name: p for p in s.phases}
        s.phases = [stored.get(ps.name) or Phase(ps.name) for ps in spec.phases]
        hooks = self._hooks
        told = hooks.wants("before_phase") or hooks.wants("after_phase")  # a phase costs no hook call otherwise
        for i, ps in enumerate(spec.phases):
            rec = s.phases[i]
            if rec.state is PhaseState.SUCCEEDED:
                s.results[ps.name] = rec.result
                continue
            s.index = i
            now = self.source.clock.now()
            s.phases[i] = replace(rec, state=PhaseState.RUNNING, started_at=now, finished_at=None, message=None)
            await self._persist(s, "started")
            if told:
                await hooks.call("before_phase", s.job, ps.name, i)
            try:
                result = check_json("result", await self._call(ps, run))
            except BaseException as exc:
                if told:  # a cancellation or a stop ends the phase too: the hook hears of every one it saw begin
                    await hooks.call("after_phase", s.job, ps.name, i, exc)
                if not isinstance(exc, Exception):
                    raise
                s.phases[i] = replace(
                    s.phases[i],
                    state=PhaseState.FAILED,
                    message=storable(str(exc)[:500]),
                    finished_at=self.source.clock.now(),
                )
                if run.stop_reason is None:
                    with contextlib.suppress(Exception):
                        await self._persist(s, "failed")
                raise
            if told:
                await hooks.call("after_phase", s.job, ps.name, i, None)
            s.phases[i] = replace(
                s.phases[i], state=PhaseState.SUCCEEDED, result=result, progress=1.0,
                finished_at=self.source.clock.now(), message=None,
            )  # fmt: skip
            s.results[ps.name] = result
            await self._persist(s, "succeeded")
        return dict(s.results)

    async def _call(self, ps: PhaseSpec, run: _Running) -> Any:
        if ps.is_async:
            run.in_thread = False
            return await ps.fn(JobContext(run.shared))
        run.in_thread = True
        loop = asyncio.get_running_loop()
        # In the job's context, as an async task runs: what a ``before_run`` hook set there is seen in the thread.
        run_in_context = contextvars.copy_context().run
        return await loop.run_in_executor(self._executor, run_in_context, ps.fn, SyncJobContext(run.shared, loop))

    async def _persist(self, s: SharedState, event: str | None) -> None:
        """Store the phase records now (fenced); raise _LeaseLost if the job is no longer ours."""
        job = s.job
        assert job.lease_token is not None
        name = s.phases[s.index].name if s.phases else "run"
        update = PhaseUpdate(
            job.id,
            LeaseToken(job.lease_token),
            tuple(s.phases),
            event=event and f"phase.{event}",
            event_data={"phase": name, "index": s.index, "job_progress": overall_progress(s.phases)} if event else None,
        )
        s.dirty = False
        changed = await self.source.save_phases([update])
        if not changed.jobs:
            run = self._inflight.get(job.id)
            if run is not None:
                run.stop_reason = "lease_lost"
            raise _LeaseLost(job.id)

    # -- helpers running beside the pump ------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.options.heartbeat_every)
            try:
                await self._heartbeat()
            except Exception:
                log.exception("heartbeat failed; will retry")
            try:
                await self._beat()
            except Exception:
                log.exception("telling the registry this worker lives failed; will retry")

    async def _progress_loop(self) -> None:
        """Save reported progress every ``progress_every`` seconds, batched, with a ``phase.progress``
        event, so watchers (live view, SSE, dashboard) see it move without a write per report."""
        while True:
            await asyncio.sleep(self.options.progress_every)
            try:
                await self._save_progress()
            except Exception:
                log.exception("saving progress failed; will retry")

    async def _save_progress(self) -> None:
        updates = []
        for r in list(self._inflight.values()):
            s = r.shared
            if not s.dirty or not s.phases or r.outcome is not None:
                continue
            s.dirty = False
            current = s.phases[s.index]
            data = {"phase": current.name, "index": s.index, "progress": current.progress,
                    "job_progress": overall_progress(s.phases), "message": current.message}  # fmt: skip
            updates.append(PhaseUpdate(r.lease.job_id, r.lease.token, tuple(s.phases), "phase.progress", data))
        if updates:
            await self.source.save_phases(updates)

    async def _heartbeat(self) -> None:
        # A job whose outcome is recorded is only running its hooks: its lease may be gone already, rightly.
        runs = [r for r in self._inflight.values() if r.outcome is None]
        waiting = self._buffer.jobs()
        if not runs and not waiting:
            return
        leases = [r.lease for r in runs] + leases_of(waiting)
        hb = await self.source.heartbeat_jobs(leases, self.options.lease_seconds)
        lost = [j.id for j in waiting if j.id not in hb.held]
        if lost:  # taken from this worker (rescued as expired) before it started them: they run elsewhere
            log.warning("leases of %d claimed jobs lost before they started; dropping them", len(lost))
            self._buffer.drop(lost)
        if self.options.observer is not None:
            self.options.observer.leases_extended(len(hb.held))
        for r in runs:
            if r.task is None or r.task.done() or self._inflight.get(r.lease.job_id) is not r:
                continue
            if r.lease.job_id not in hb.held:
                log.warning("lease of job %s lost; stopping it", r.lease.job_id)
                r.stop_reason = "lease_lost"
                r.shared.cancel.set()
                r.task.cancel()
            elif r.lease.job_id in hb.cancel_requested and r.stop_reason is None:
                r.stop_reason = "cancel"
                r.shared.cancel.set()
                if not r.in_thread:
                    r.task.cancel()

    async def _rescue_loop(self) -> None:
        """Every ``liveness_interval``, the jobs of workers whose process is gone; every ``rescue_interval``,
        those whose lease expired (a worker alive but stuck, or one that never registered)."""
        loop = asyncio.get_running_loop()
        next_sweep = loop.time()
        while True:
            try:
                changed = await self.source.rescue_dead_workers()
                if changed.jobs:
                    log.warning("rescued %d jobs of dead workers", len(changed.jobs))
            except Exception:
                log.exception("rescuing the jobs of dead workers failed; will retry")
            if loop.time() >= next_sweep:
                next_sweep = loop.time() + self.options.rescue_interval
                try:
                    changed = await self.source.rescue_jobs()
                    if changed.jobs:
                        log.warning("rescued %d jobs whose lease expired", len(changed.jobs))
                except Exception:
                    log.exception("rescue failed; will retry")
            await asyncio.sleep(min(self.options.liveness_interval, self.options.rescue_interval))

    async def _flush_loop(self) -> None:
        assert self._flush_wanted is not None
        loop = asyncio.get_running_loop()
        spacing = self.options.flush_spacing
        last = -spacing
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted.clear()
            # Jobs finishing in this loop turn join the batch, and those finishing within ``flush_spacing`` of
            # the last flush's start too, unless FLUSH_EARLY outcomes are waiting (a busy worker), a job that
            # others depend on finished (they wait for its outcome) or the worker is stopping: see
            # WorkerOptions.flush_spacing.
            await asyncio.sleep(0)
            deadline = last + spacing
            while True:
                self._flush_wanted.clear()  # before the test: an outcome added after it sets the event again
                if (
                    self._closing
                    or self._dependents_wait
                    or self._waiting_outcomes() >= FLUSH_EARLY
                    or loop.time() >= deadline
                ):
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(deadline - loop.time()):
                        await self._flush_wanted.wait()
            last = loop.time()
            self._dependents_wait = False
            await self._flush()
            if self._closing:
                return

    def _waiting_outcomes(self) -> int:
        return len(self._completions) + len(self._failures) + len(self._releases)

    async def _flush(self, final: bool = False) -> None:
        tries = 0
        while self._completions or self._failures or self._releases:
            completions, self._completions = self._completions, []
            failures, self._failures = self._failures, []
            releases, self._releases = self._releases, []
            try:
                if completions:
                    await self.source.complete_jobs(completions)
                if failures:
                    await self.source.fail_jobs(failures)
                if releases:
                    await self.source.release_jobs(releases)
            except asyncio.CancelledError:
                # Cancelled (run() itself was) while this batch was on its way to the store: keep it for the
                # final flush. Sending a report again is safe, as every report is fenced by its lease token
                # (one the store already applied changes nothing the second time).
                self._completions[:0], self._failures[:0], self._releases[:0] = completions, failures, releases
                raise
            except Exception:
                # Keep them: the lease protects the jobs meanwhile, and a late report is fenced.
                self._completions[:0], self._failures[:0], self._releases[:0] = completions, failures, releases
                tries += 1
                log.exception("reporting outcomes failed (try %d)", tries)
                if (final or self._closing) and tries >= 5:  # shutting down: do not retry forever
                    return
                await asyncio.sleep(min(2.0, 0.05 * 2**tries))


def leases_of(jobs: Sequence[Job]) -> list[Lease]:
    return [Lease(j.id, j.lease_token) for j in jobs if j.lease_token is not None]
