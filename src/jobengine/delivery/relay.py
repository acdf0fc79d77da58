"""The outbox relay: publishes the messages the store owes the broker, then forgets them.

A job and its outbox row are committed together (:mod:`jobengine.ports.outbox`). The relay takes due rows
(holding them for ``hold`` seconds, so relays of other processes leave them alone), publishes one message per
row, and deletes the rows. Failure policy:

- the broker refuses or is away: the relay keeps the rows it holds and publishes them again, backing off up
  to ``max_backoff``; a process that dies holding rows lets them go when the hold ends;
- a crash after publishing and before deleting: the rows are published again; the message key is the job id,
  so the broker drops the copy within its idempotency window, and past it a duplicate claims nothing.

Also, every ``sweep_after / 2`` seconds, a *sweep*: runnable jobs that should have started more than
``sweep_after`` seconds ago are published again (keyed per sweep period), in case their message was lost
(a broker that restarted without persistence, a publish after a dependency finished that died with its
process). Their duplicates are harmless.

When the transport finds that the broker failed over or restarted (:meth:`history_lost`), what it took in
its last moments may be gone, whatever the jobs' age: the relay then publishes *every* runnable job again,
at once, page by page, keyed by the new history, so relays of other processes that saw the same change add
nothing within the idempotency window.

It runs in every engine process that has a broker transport (``engine.start()`` starts it). The rows a
process commits are handed to its relay (:meth:`offer`) and published right after the commit by a publisher
task of their own, so a job reaches the broker one round trip after its commit; the relay's loop publishes
what that could not (the broker away) and the rows of other processes, which it notices through the store's
notifier or within ``idle`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from jobengine.aio import call_on
from jobengine.core.clock import Clock
from jobengine.ports.notifier import Notifier
from jobengine.ports.outbox import OutboxRow, OutboxStore
from jobengine.ports.transport import Message, Transport

log = logging.getLogger("jobengine.relay")

#: Seconds a published row waits for others to be deleted with it (one store write for many rows).
DELETE_AFTER = 0.2

#: Seconds the publisher waits for more rows before it publishes, while this process offers rows less than
#: ``BRISK`` seconds apart: one broker call then carries the rows of several enqueues (a call costs the
#: process more CPU than the enqueue's own commit). ``BRISK`` is a quarter of the wait, so a wait is taken
#: only by a producer fast enough to fill it with several rows; rows offered further apart are published at
#: once, so a job enqueued at a moderate rate reaches the broker without delay.
LINGER = 0.004
BRISK = LINGER / 4

#: Seconds between looks at the outbox that the store's notifier prompts. Every commit of every process
#: notifies, and nearly all of them are enqueues whose rows their own relay holds and publishes: a look per
#: commit would be a query per job in every process with a relay.
STORE_LOOK_EVERY = 0.05

#: How far ahead a sweep after a failover looks: every runnable job, however far its run_at.
_EVERY_RUNNABLE = 100 * 365 * 86400.0

RUN_ID_KEY = "run_id"
SCHEDULE_ID_KEY = "schedule_id"


@dataclass(frozen=True, slots=True)
class Looked:
    """A round's look at the outbox: when its earliest row not yet due comes due (None: there is none)."""

    later: float | None


def message_of(row: OutboxRow) -> Message:
    h = row.headers
    return Message(row.job_id, row.queue, key=row.job_id, run_id=h.get(RUN_ID_KEY), schedule_id=h.get(SCHEDULE_ID_KEY))


class OutboxRelay:
    name = "outbox-relay"

    def __init__(
        self,
        store: OutboxStore,
        transport: Transport,
        clock: Clock,
        wake: Notifier | None = None,
        *,
        batch: int = 1000,
        hold: float = 30.0,
        idle: float = 1.0,
        sweep_after: float = 300.0,
        max_backoff: float = 2.0,
    ) -> None:
        self.store = store
        self.transport = transport
        self.clock = clock
        self.wake = wake
        self.batch = batch
        self.hold = hold
        self.idle = idle
        self.sweep_after = sweep_after
        self.max_backoff = max_backoff
        self.published = 0  # messages published by this relay (tests, status)
        self._held: list[OutboxRow] = []  # claimed (or offered), not yet published
        self._fresh: list[OutboxRow] = []  # offered by this process, for the loop to publish
        self._quick: list[OutboxRow] = []  # offered by this process, for the publisher task
        self._publisher: asyncio.Task[None] | None = None
        self._offered_at = float("-inf")  # when the last due rows were offered
        self._brisk = False  # the last offer came less than BRISK after the one before
        self._failing = False  # the loop's last publish failed: offered rows wait for its backoff
        self._done: list[int] = []  # published, not yet deleted
        self._done_since = 0.0
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._home: asyncio.AbstractEventLoop | None = None  # the event loop the relay runs on
        self._next_sweep = 0.0
        self._lost: str | None = None  # the broker's new history, while its sweep is owed

    def offer(self, rows: Sequence[OutboxRow]) -> None:
        """Rows this process just committed, born held for this relay: those due are published at once by the
        relay's publisher task, while the caller goes on (its next commit overlaps the publish), with no claim
        and no store write on the way to a worker. Safe from any thread (``enqueue_sync`` runs on the engine's
        own loop in another thread); from another loop it is handed over."""
        call_on(self._home, self._take, list(rows))

    def _take(self, rows: Sequence[OutboxRow]) -> None:
        now = self.clock.now()
        due = [r for r in rows if r.available_at <= now]
        if not due:
            return
        self._brisk, self._offered_at = now - self._offered_at < BRISK, now
        if not self.running or self._failing:
            # The loop publishes them (with its backoff while the broker is away).
            self._fresh.extend(due)
            self._kick.set()
            return
        self._quick.extend(due)
        if self._publisher is None or self._publisher.done():
            self._publisher = asyncio.get_running_loop().create_task(self._publish_quick(), name="jobengine-publish")

    async def _publish_quick(self) -> None:
        """Publish what this process offered, in batches of what came meanwhile. Rows the broker refuses, or
        that a cancellation interrupts, go to the loop, which publishes them again. While offers come less than
        ``BRISK`` apart, it waits ``LINGER`` for more before each call."""
        while self._quick:
            rows: list[OutboxRow] = []
            try:
                if self._brisk and len(self._quick) < self.batch:
                    await asyncio.sleep(LINGER)
                rows, self._quick = self._quick[: self.batch], self._quick[self.batch :]
                await self.transport.publish([message_of(r) for r in rows])
            except BaseException as exc:
                self._fresh += rows + self._quick
                self._quick = []
                self._kick.set()
                if not isinstance(exc, Exception):
                    raise
                log.debug("relay: publishing what was just enqueued failed (%s); the loop tries again", exc)
                return
            self.published += len(rows)
            if not self._done:
                self._kick.set()  # the loop sets the deadline of the delete
            self._forget_later(rows, self.clock.now())

    def _forget_later(self, rows: Sequence[OutboxRow], now: float) -> None:
        """Published rows are deleted later, in batches: a sequential producer would otherwise pay a store
        write per enqueue. The rows stay held meanwhile; if this process dies first, they are published
        again (harmless)."""
        if not self._done:
            self._done_since = now
        self._done += [r.id for r in rows]

    async def run_once(self) -> int:
        """Publish what is due (including rows held from a failed attempt); return how many were published.
        Raises what the transport or store raises (the rows stay held)."""
        published, _ = await self._round()
        return published

    async def _round(self) -> tuple[int, Looked | None]:
        """:meth:`run_once`, with what its look at the outbox found (None: it published rows it already had,
        without looking)."""
        now = self.clock.now()
        look: Looked | None = None
        if not self._held and self._fresh:
            self._held, self._fresh = self._fresh[: self.batch], self._fresh[self.batch :]
        if not self._held:
            due, later = await self.store.outbox_due(now)
            look = Looked(later)
            if not due:
                return 0, look
            self._held = await self.store.claim_outbox(now, self.batch, self.hold)
        if not self._held:
            return 0, look
        rows = self._held
        await self.transport.publish([message_of(r) for r in rows])
        self._held = []
        self.published += len(rows)
        self._forget_later(rows, now)
        if len(self._done) >= self.batch:
            await self._delete_done()
        return len(rows), look

    async def _delete_done(self) -> None:
        done, self._done = self._done, []
        try:
            await self.store.delete_outbox(done)
        except BaseException:
            self._done[:0] = done
            raise

    async def sweep(self) -> int:
        """Publish overdue runnable jobs again; return how many."""
        now = self.clock.now()
        period = int(now // max(self.sweep_after, 1.0))
        late = await self.store.overdue_jobs(now - self.sweep_after, self.batch)
        if late:
            messages = [Message(j.id, j.queue, key=f"{j.id}:sweep:{j.attempt}:{period}") for j in late]
            added = sum(await self.transport.publish(messages))
            if added:
                log.warning("relay: published %d overdue job(s) again (their message may have been lost)", added)
        return len(late)

    def history_lost(self, token: str) -> None:
        """The broker failed over or restarted (``token`` names its new history): publish every runnable job
        again, soon. Called on the relay's event loop."""
        self._lost = token
        self._kick.set()

    async def sweep_lost(self, token: str) -> int:
        """Publish every runnable job again (due or not: a delayed message may be gone too), keyed by
        ``token``; return how many were added."""
        horizon = self.clock.now() + _EVERY_RUNNABLE
        after: tuple[float, str] | None = None
        added = 0
        while True:
            jobs = await self.store.overdue_jobs(horizon, self.batch, after)
            if jobs:
                messages = [Message(j.id, j.queue, key=f"{j.id}:lost:{token}:{j.attempt}") for j in jobs]
                added += sum(await self.transport.publish(messages))
                after = (jobs[-1].run_at, jobs[-1].id)
            if len(jobs) < self.batch:
                break
        log.warning("relay: the broker failed over or restarted; published %d runnable job(s) again", added)
        return added

    async def flush(self) -> None:
        """Publish until nothing is due, and forget what was published (for shutdown and tests)."""
        if self._publisher is not None and not self._publisher.done():
            await asyncio.wait([self._publisher])
        while await self.run_once() >= self.batch or self._fresh:
            pass
        if self._done:
            await self._delete_done()

    # -- service ------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._home = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            self._next_sweep = self.clock.now() + self.sweep_after / 2
            self._task = asyncio.create_task(self._loop(), name="jobengine-outbox-relay")

    async def stop(self) -> None:
        task, self._task = self._task, None
        # Cancelled again until it ends: a cancellation can be lost on its way (an awaitable finishing as its
        # awaiter is cancelled), and a relay that lost its only one would keep this stop waiting forever.
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=0.1)
        publisher = self._publisher
        if publisher is not None and not publisher.done():
            # What it holds goes to the flush below if it ends without publishing.
            done, _ = await asyncio.wait([publisher], timeout=5.0)
            if not done:
                publisher.cancel()
                await asyncio.wait([publisher])
        if task is not None and not task.cancelled() and task.exception() is not None:
            log.warning("relay: stopped with %r", task.exception())
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5.0):
                await self.flush()  # what this process enqueued last

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _loop(self) -> None:
        failures = 0
        while True:
            try:
                if (lost := self._lost) is not None:
                    await self.sweep_lost(lost)
                    if self._lost == lost:
                        self._lost = None
                n, look = await self._round()
                if self.clock.now() >= self._next_sweep:
                    self._next_sweep = self.clock.now() + self.sweep_after / 2
                    await self.sweep()
                failures = 0
                self._failing = False
            except Exception as exc:
                failures += 1
                self._failing = True
                delay = min(self.max_backoff, 0.05 * 2**failures)
                log.warning("relay: publishing failed (%s); trying again in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                continue
            if n >= self.batch or self._fresh:
                continue  # more is due
            await self._wait(look)

    async def _wait(self, look: Looked | None) -> None:
        """Until this process offers rows, the store's notifier rings, the earliest row not yet due comes
        due (as ``look`` found it, if the round looked), the published rows are to be deleted, or ``idle``."""
        timeout = self.idle
        if self._done:
            wait = self._done_since + DELETE_AFTER - self.clock.now()
            if wait <= 0:
                await self._delete_done()
            else:
                timeout = min(timeout, wait)
        later: float | None = None
        if look is not None:  # rows due since were held by others, or are offered to us
            later = look.later
        else:
            with contextlib.suppress(Exception):
                _, later = await self.store.outbox_due(self.clock.now())
        if later is not None:
            timeout = max(0.0, min(timeout, later - self.clock.now()))
        if self._kick.is_set():
            self._kick.clear()
            return
        kicked: asyncio.Future[object] = asyncio.ensure_future(self._kick.wait())
        waiters = [kicked]
        if self.wake is not None:
            waiters.append(asyncio.ensure_future(self.wake.wait(timeout)))
        try:
            done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
        if kicked not in done:
            # Another process's commits wake us through the store's notifier, but so does every commit:
            # look at the outbox at most this often, unless this process hands us rows meanwhile.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STORE_LOOK_EVERY):
                    await self._kick.wait()
        self._kick.clear()
