"""Concurrent small enqueues written as one statement: :class:`InsertCoalescer`.

Each enqueue in its own transaction costs a round trip and a commit (a WAL flush) each, and takes a pooled
connection for both; a server taking single enqueues from many clients spends its pool waiting on commits.
A call that finds a write free and nobody waiting writes its jobs itself, in its own task (a sequential
producer's every call). Calls that arrive while ``flushes`` writes are already running wait together, and
the next write takes all of them (up to ``max_jobs`` jobs) in one INSERT: one round trip, one commit.

Only calls whose jobs cannot be refused one by one are grouped: no idempotency key, no dependency, no
watermark (the store checks that), so the group's statement can only fail as a whole (the server, a taken
id). When it fails, each call of the group is written again alone and gets its own answer or error. Every
call returns once the transaction holding its jobs has committed.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from jobengine.core.ids import JobId
from jobengine.core.models import Inserted, NewJob
from jobengine.errors import StoreUnavailable

#: Writes jobs in one transaction: (jobs, now, phases) -> what was written.
Insert = Callable[[Sequence[NewJob], float, Sequence[tuple[str, ...]]], Awaitable[Inserted]]


@dataclass(slots=True)
class _Call:
    jobs: Sequence[NewJob]
    now: float
    phases: Sequence[tuple[str, ...]]
    future: asyncio.Future[Inserted]


@dataclass(slots=True)
class _Group:
    """The calls of one event loop waiting for a write, and how many writes run."""

    waiting: deque[_Call] = field(default_factory=deque)
    flushing: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class InsertCoalescer:
    """Groups concurrent :meth:`insert` calls of one event loop into shared writes by ``insert``, at most
    ``flushes`` at a time per loop (the rest of the pool stays free for other work)."""

    def __init__(self, insert: Insert, *, flushes: int, max_jobs: int = 1000) -> None:
        self._insert = insert
        self._flushes = max(1, flushes)
        self._max_jobs = max_jobs
        self._groups: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Group] = weakref.WeakKeyDictionary()

    async def insert(self, jobs: Sequence[NewJob], now: float, phases: Sequence[tuple[str, ...]]) -> Inserted:
        loop = asyncio.get_running_loop()
        group = self._groups.get(loop)
        if group is None:
            group = self._groups[loop] = _Group()
        if not group.waiting and group.flushing < self._flushes:
            # Nobody waits and a write may start: the call writes its own jobs in its own task. A task and a
            # future to hand them to would cost a sequential producer more than the rest of its Python.
            group.flushing += 1
            try:
                return await self._insert(jobs, now, phases)
            finally:
                group.flushing -= 1
                if group.waiting and group.flushing < self._flushes:
                    self._start(loop, group)  # calls that queued behind this write while every write ran
        call = _Call(jobs, now, phases, loop.create_future())
        group.waiting.append(call)
        if group.flushing < self._flushes:
            self._start(loop, group)
        return await call.future

    def _start(self, loop: asyncio.AbstractEventLoop, group: _Group) -> None:
        group.flushing += 1
        task = loop.create_task(self._flush(group), name="jobengine-insert-flush")
        group.tasks.add(task)  # held until done: a task only the loop references may be collected
        task.add_done_callback(group.tasks.discard)

    async def _flush(self, group: _Group) -> None:
        batch: list[_Call] = []
        try:
            while group.waiting:
                batch = []
                size = 0
                while group.waiting and (not batch or size + len(group.waiting[0].jobs) <= self._max_jobs):
                    call = group.waiting.popleft()
                    batch.append(call)
                    size += len(call.jobs)
                await self._write(batch)
        except BaseException as exc:  # cancelled with the loop: nobody may wait for ever
            gone = StoreUnavailable(f"postgres: the enqueue was not written ({exc!r})")
            for call in batch:
                _settle(call, error=gone)
            while group.waiting:
                _settle(group.waiting.popleft(), error=gone)
            raise
        finally:
            group.flushing -= 1

    async def _write(self, batch: list[_Call]) -> None:
        if len(batch) > 1:
            jobs = [j for c in batch for j in c.jobs]
            phases = [p for c in batch for p in c.phases]
            try:
                # One time for the group: the latest of its calls, so no job is written as created before
                # the call that asked for it.
                inserted = await self._insert(jobs, max(c.now for c in batch), phases)
            except Exception:
                pass  # each call again on its own below, for its own answer
            else:
                for call, part in zip(batch, _split(inserted, [len(c.jobs) for c in batch]), strict=True):
                    _settle(call, result=part)
                return
        for call in batch:
            try:
                _settle(call, result=await self._insert(call.jobs, call.now, call.phases))
            except Exception as exc:
                _settle(call, error=exc)


def _split(inserted: Inserted, sizes: Sequence[int]) -> list[Inserted]:
    """``inserted`` cut back into the calls it was made of (its jobs in their order; events by job)."""
    parts: list[Inserted] = []
    start = 0
    owner: dict[JobId | None, int] = {}
    for index, n in enumerate(sizes):
        parts.append(Inserted(inserted.jobs[start : start + n], inserted.created[start : start + n], []))
        for job in inserted.jobs[start : start + n]:
            owner[job.id] = index
        start += n
    for event in inserted.events:
        parts[owner.get(event.job_id, 0)].events.append(event)
    return parts


def _settle(call: _Call, *, result: Inserted | None = None, error: BaseException | None = None) -> None:
    if call.future.done():  # its caller was cancelled
        return
    if error is not None:
        call.future.set_exception(error)
    else:
        assert result is not None
        call.future.set_result(result)
