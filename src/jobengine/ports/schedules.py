"""The ScheduleStore port: schedules, the ledger of fired ticks, runs and their summaries.

Exactly once: :meth:`ScheduleStore.fire_ticks` writes, in **one transaction**, a row per tick under the
unique key ``(schedule_id, tick)`` together with the tick's run and that run's jobs, and moves the
schedule's cursor only if it is still where the scheduler read it (and the schedule's version too). A
tick whose key is already taken is not fired again, so any number of scheduler replicas (even two that
both believe they lead), restarts and crashes fire each tick at most once; a crash before the commit
leaves nothing, and the next pass fires the tick. Leadership only avoids wasted work.

Like the Store, every mutating call appends its events (audit records included) in its transaction and
returns them; values in and out are domain models. Stores offer this port through
:class:`SchedulingBackend`, next to a :class:`~jobengine.ports.leader.Leader` for the scheduler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from jobengine.core.graphs import GraphSpec
from jobengine.core.ids import RunId, ScheduleId
from jobengine.core.models import Event, Job, Json, NewEvent, NewJob
from jobengine.core.runs import JobOutcome, Run, RunFilter, Segment
from jobengine.core.schedules import OverlapPolicy, Schedule, ScheduleFilter
from jobengine.ports.leader import Leader
from jobengine.ports.signatures import SignatureStore


@dataclass(frozen=True, slots=True)
class PlannedRun:
    """A run and its jobs, ready to be written in one transaction. ``items[i]``: items of ``jobs[i]``.
    ``stream`` and ``cursor_to``: the run moves that stream's cursor up to ``cursor_to`` in the
    transaction that records its last segment's success (at once when it has no jobs); never otherwise.
    ``graph``: the run fires a graph whose nodes are ``jobs`` (each a segment of the run): the graph's row
    and node rows are written with them, in the same transaction."""

    run: Run
    jobs: tuple[NewJob, ...] = ()
    phases: tuple[tuple[str, ...], ...] = ()
    items: tuple[int, ...] = ()
    stream: str | None = None
    cursor_to: Json = None
    graph: GraphSpec | None = None


@dataclass(frozen=True, slots=True)
class RunCursor:
    """Where a stream's incremental runs start: the greatest item its successful runs reached
    (``core.run_requests``), the run that moved it there, and when."""

    value: Json
    run_id: RunId
    updated_at: float


@dataclass(frozen=True, slots=True)
class TickClaim:
    """One scheduler pass over one schedule: the ticks that fire (one planned run each, oldest first) and
    where the cursor moves. Applies only while the schedule is enabled, at ``version``, with ``cursor``."""

    schedule_id: ScheduleId
    version: int
    cursor: float
    new_cursor: float
    next_fire_at: float | None
    overlap: OverlapPolicy
    runs: tuple[PlannedRun, ...] = ()
    events: tuple[NewEvent, ...] = ()  # recorded with the claim (e.g. schedule.misfired)
    fired_by: str | None = None


@dataclass(frozen=True, slots=True)
class Fired:
    """What a claim (or a manual trigger) wrote."""

    runs: list[Run] = field(default_factory=list)
    skipped: list[float] = field(default_factory=list)  # ticks the overlap policy dropped
    jobs: list[Job] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


class ScheduleStore(Protocol):
    # -- schedules ----------------------------------------------------------------------------------
    async def insert_schedule(self, schedule: Schedule, event: NewEvent) -> tuple[Schedule, list[Event]]:
        """Raises AlreadyExists when the tenant already has a schedule of that name."""
        ...

    async def update_schedule(
        self, schedule: Schedule, expected_version: int, event: NewEvent
    ) -> tuple[Schedule, list[Event]]:
        """Replace the stored schedule (same id) if its version is still ``expected_version``.
        Raises NotFound (gone), IllegalState (changed meanwhile), AlreadyExists (renamed onto a taken name)."""
        ...

    async def delete_schedule(
        self, schedule_id: ScheduleId, tenant: str | None, now: float, event: NewEvent
    ) -> list[Event]:
        """Delete the schedule (its runs, jobs and ticks stay as history). Raises NotFound."""
        ...

    async def get_schedules(self, ids: Sequence[ScheduleId], tenant: str | None = None) -> list[Schedule]: ...

    async def find_schedule(self, tenant: str, name: str) -> Schedule | None: ...

    async def list_schedules(self, filter: ScheduleFilter) -> list[Schedule]:
        """By tenant, then name."""
        ...

    async def due_schedules(self, now: float, limit: int) -> list[Schedule]:
        """Enabled schedules whose next_fire_at <= now, earliest first."""
        ...

    async def next_fire_at(self) -> float | None:
        """The earliest next_fire_at of every enabled schedule (None: nothing is scheduled)."""
        ...

    # -- firing -------------------------------------------------------------------------------------
    async def fire_ticks(self, claim: TickClaim, now: float) -> Fired | None:
        """Record each tick of the claim under its unique key with its run and jobs, and move the cursor;
        None (nothing written) when the schedule is no longer at the claimed version and cursor, or is
        disabled or gone. A tick already recorded is left out. Overlap, checked against the runs of the
        planned run's ``schedule_id`` (a run request's is its stream) in planning / queued / running (those
        of this claim included): ``allow`` writes the run, ``skip`` records the tick as skipped, ``queue``
        writes the run as ``planning`` without its jobs. An incremental run whose stream has another
        unfinished one is recorded as skipped whatever the policy, its ``schedule.skipped`` event saying why."""
        ...

    async def insert_run(self, planned: PlannedRun, now: float, event: NewEvent | None = None) -> Fired:
        """Write a run that no tick fired (a manual trigger, a retry) with its jobs, and ``event``."""
        ...

    async def waiting_runs(self, limit: int) -> list[Run]:
        """Runs in ``planning`` whose turn has come: the oldest of their schedule, with no run of the
        schedule queued or running."""
        ...

    async def plan_waiting_run(self, planned: PlannedRun, now: float) -> Fired | None:
        """Write the jobs of a waiting run and its new state (from ``planned.run``); None if the run is no
        longer waiting or another run of its schedule is queued or running."""
        ...

    # -- progress -----------------------------------------------------------------------------------
    async def start_runs(self, ids: Sequence[RunId], now: float) -> list[Event]:
        """Queued runs whose first job started become running."""
        ...

    async def record_outcomes(self, outcomes: Sequence[JobOutcome], now: float) -> list[Event]:
        """Apply each job's outcome to its segment and run (``core.runs.apply_outcome``); unknown jobs are
        ignored. Idempotent: the same outcome twice counts once."""
        ...

    async def cancel_run(
        self, run_id: RunId, tenant: str | None, reason: str, actor: str, now: float
    ) -> tuple[Run, list[Event]]:
        """An unfinished run becomes cancelled (the caller cancels its jobs). Raises NotFound."""
        ...

    # -- reads --------------------------------------------------------------------------------------
    async def get_runs(self, ids: Sequence[RunId], tenant: str | None = None) -> list[Run]: ...

    async def list_runs(self, filter: RunFilter) -> list[Run]:
        """Newest first."""
        ...

    async def run_segments(self, run_id: RunId) -> list[Segment]:
        """The run's jobs in segment order."""
        ...

    async def active_runs(self, limit: int, after_id: RunId | None = None) -> list[Run]:
        """Queued and running runs in id order, after ``after_id`` (to page through them)."""
        ...

    async def get_cursor(self, tenant: str, stream: str) -> RunCursor | None:
        """The stream's cursor; None before a run of it succeeded."""
        ...

    async def prune_runs(self, before: float, limit: int) -> int:
        """Delete up to ``limit`` runs that ended before ``before`` (with their segment rows), and up to
        ``limit`` tick records fired before it; return how many rows went. Runs still going are never
        touched; a tick record below its schedule's cursor is history only (the cursor's compare-and-set
        keeps a tick from firing twice), so jobs of a deleted run keep running and nothing fires again."""
        ...


class SchedulingStore(ScheduleStore, SignatureStore, Protocol):
    """Both ports, as one backend object offers them."""


@runtime_checkable
class SchedulingBackend(Protocol):
    """A Store that supports the scheduler: it hands out its scheduling store and leaders."""

    def scheduling(self) -> SchedulingStore: ...

    def leader(self, name: str) -> Leader:
        """A Leader for ``name`` among every process of this store (the scheduler uses ``scheduler``)."""
        ...
