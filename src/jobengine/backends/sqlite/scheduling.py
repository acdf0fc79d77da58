"""The scheduling ports on SQLite: each call is one ``BEGIN IMMEDIATE`` transaction on the store's thread
and connection, so a tick's ledger row, its run, the run's jobs and their events commit together.

Exactly once (see ``ports/schedules.py``): the claim's first statement moves the schedule's cursor only
if version and cursor are still as the scheduler read them; every tick then inserts its row under the
primary key (schedule_id, tick_ms) with ``ON CONFLICT DO NOTHING``, and only a tick whose row went in
gets a run. Two processes racing serialise on the write lock; the second finds the cursor moved.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jobengine.backends.scheduling_rows import SEGMENT_COLUMNS, schedule_values, segment_from_row
from jobengine.core import firing
from jobengine.core import runs as rn
from jobengine.core.ids import RunId, ScheduleId
from jobengine.core.models import Event, NewEvent
from jobengine.core.runs import JobOutcome, Run, RunFilter, RunState, Segment
from jobengine.core.schedules import Schedule, ScheduleFilter
from jobengine.errors import AlreadyExists, IllegalState, NotFound
from jobengine.ports.schedules import Fired, PlannedRun, TickClaim

from . import schedule_rows as sr
from .inserts import insert_jobs
from .rows import append_events, insert_rows, json_list
from .signatures import SqliteSignatures

if TYPE_CHECKING:
    from jobengine.ports.schedules import SchedulingStore

    from .store import SqliteStore

_INSERT_SCHEDULE = (
    "INSERT INTO schedules (id, tenant, name, spec, enabled, version, cursor, next_fire_at, created_at, "
    "updated_at, created_by, updated_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPDATE_SCHEDULE = (
    "UPDATE schedules SET tenant = ?, name = ?, spec = ?, enabled = ?, version = ?, cursor = ?, next_fire_at = ?, "
    "created_at = ?, updated_at = ?, created_by = ?, updated_by = ? WHERE id = ? AND version = ?"
)
_ACTIVE = "(state = 'planning' OR state = 'queued' OR state = 'running')"  # as in the index runs_active
_BUSY = "(state = 'queued' OR state = 'running')"
_INSERT_SEGMENTS = "INSERT INTO run_jobs (job_id, run_id, segment, items) VALUES "


# -- schedules ---------------------------------------------------------------------------------------
def _insert_schedule(conn: sqlite3.Connection, s: Schedule, event: NewEvent) -> list[Event]:
    try:
        conn.execute(_INSERT_SCHEDULE, schedule_values(s))
    except sqlite3.IntegrityError:
        raise AlreadyExists("schedule", s.name) from None
    return append_events(conn, [event], s.updated_at)


def _update_schedule(conn: sqlite3.Connection, s: Schedule, expected: int, event: NewEvent) -> list[Event]:
    values = schedule_values(s)
    try:
        cur = conn.execute(_UPDATE_SCHEDULE, (*values[1:], s.id, expected))
    except sqlite3.IntegrityError:
        raise AlreadyExists("schedule", s.name) from None
    if cur.rowcount == 0:
        if conn.execute("SELECT 1 FROM schedules WHERE id = ?", (s.id,)).fetchone() is None:
            raise NotFound("schedule", s.id)
        raise IllegalState(f"schedule {s.id} changed meanwhile; read it again and retry")
    return append_events(conn, [event], s.updated_at)


def _delete_schedule(
    conn: sqlite3.Connection, schedule_id: str, tenant: str | None, now: float, event: NewEvent
) -> list[Event]:
    cur = conn.execute(
        "DELETE FROM schedules WHERE id = ? AND (? IS NULL OR tenant = ?)", (schedule_id, tenant, tenant)
    )
    if cur.rowcount == 0:
        raise NotFound("schedule", schedule_id)
    return append_events(conn, [event], now)


# -- firing ------------------------------------------------------------------------------------------
def _write_run(conn: sqlite3.Connection, planned: PlannedRun, now: float, out: Fired, *, update: bool) -> None:
    run = planned.run
    if update:
        sr.save_run(conn, run)
    else:
        sr.insert_run(conn, run)
    if planned.jobs:
        phases = list(planned.phases) or [()] * len(planned.jobs)
        inserted = insert_jobs(conn, planned.jobs, now, phases)
        out.jobs.extend(inserted.jobs)
        out.events.extend(inserted.events)
        rows = [
            (job.id, run.id, i, planned.items[i] if i < len(planned.items) else 0)
            for i, job in enumerate(inserted.jobs)
        ]
        insert_rows(conn, _INSERT_SEGMENTS, 4, rows)
    out.runs.append(run)
    out.events.extend(append_events(conn, [rn.run_event(rn.RUN_PLANNED if update else rn.RUN_CREATED, run)], now))


def _has_run(conn: sqlite3.Connection, schedule_id: str, states: str) -> bool:
    sql = f"SELECT 1 FROM runs WHERE schedule_id = ? AND {states} LIMIT 1"
    return conn.execute(sql, (schedule_id,)).fetchone() is not None


def _fire_ticks(conn: sqlite3.Connection, claim: TickClaim, now: float) -> Fired | None:
    cur = conn.execute(
        "UPDATE schedules SET cursor = ?, next_fire_at = ? "
        "WHERE id = ? AND version = ? AND cursor = ? AND enabled = 1 RETURNING tenant",
        (claim.new_cursor, claim.next_fire_at, claim.schedule_id, claim.version, claim.cursor),
    )
    row = cur.fetchone()
    if row is None:
        return None  # changed, paused, deleted, or another scheduler claimed these ticks first
    tenant = row[0]
    out = Fired()
    for planned in claim.runs:
        tick = planned.run.tick
        assert tick is not None
        action = firing.overlap_action(claim.overlap, _has_run(conn, claim.schedule_id, _ACTIVE))
        run_id = None if action is firing.TickAction.SKIP else planned.run.id
        taken = conn.execute(
            "INSERT INTO schedule_ticks (schedule_id, tick_ms, run_id, fired_at, fired_by) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (claim.schedule_id, firing.tick_key(tick), run_id, now, claim.fired_by),
        )
        if taken.rowcount == 0:
            continue  # this tick was fired already: never twice
        if action is firing.TickAction.SKIP:
            out.skipped.append(tick)
            out.events.extend(append_events(conn, [firing.skipped_event(tenant, claim.schedule_id, tick)], now))
            continue
        if action is firing.TickAction.DEFER:
            planned = PlannedRun(firing.deferred(planned.run))
        _write_run(conn, planned, now, out, update=False)
    out.events.extend(append_events(conn, claim.events, now))
    return out


def _insert_run(conn: sqlite3.Connection, planned: PlannedRun, now: float, event: NewEvent | None) -> Fired:
    out = Fired()
    _write_run(conn, planned, now, out, update=False)
    if event is not None:
        out.events.extend(append_events(conn, [event], now))
    return out


def _plan_waiting_run(conn: sqlite3.Connection, planned: PlannedRun, now: float) -> Fired | None:
    row = conn.execute("SELECT state, schedule_id FROM runs WHERE id = ?", (planned.run.id,)).fetchone()
    if row is None or row[0] != RunState.PLANNING or _has_run(conn, row[1], _BUSY):
        return None
    out = Fired()
    _write_run(conn, planned, now, out, update=True)
    return out


# -- progress ----------------------------------------------------------------------------------------
def _runs_by_id(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, Run]:
    runs = sr.select_runs(conn, "id IN (SELECT value FROM json_each(?))", (json_list(ids),))
    return {r.id: r for r in runs}


def _start_runs(conn: sqlite3.Connection, ids: Sequence[RunId], now: float) -> list[Event]:
    events: list[NewEvent] = []
    for run in _runs_by_id(conn, list(dict.fromkeys(ids))).values():
        started, new = rn.start(run, now)
        if new:
            sr.save_run(conn, started)
            events.extend(new)
    return append_events(conn, events, now)


def _record_outcomes(conn: sqlite3.Connection, outcomes: Sequence[JobOutcome], now: float) -> list[Event]:
    rows = conn.execute(
        f"SELECT {SEGMENT_COLUMNS} FROM run_jobs WHERE job_id IN (SELECT value FROM json_each(?))",
        (json_list(o.job_id for o in outcomes),),
    )
    segments = {s.job_id: s for s in map(segment_from_row, rows)}
    runs = _runs_by_id(conn, list({s.run_id for s in segments.values()}))
    changed: dict[str, Run] = {}
    events: list[NewEvent] = []
    for o in outcomes:
        segment = segments.get(o.job_id)
        if segment is None or segment.run_id != o.run_id or o.run_id not in runs:
            continue
        run, segment, new = rn.apply_outcome(runs[o.run_id], segment, o.outcome, o.duration, now)
        runs[run.id] = changed[run.id] = run
        segments[segment.job_id] = segment
        conn.execute(
            "UPDATE run_jobs SET outcome = ?, duration = ? WHERE job_id = ?",
            (segment.outcome.value if segment.outcome else None, segment.duration, segment.job_id),
        )
        events.extend(new)
    for run in changed.values():
        sr.save_run(conn, run)
    return append_events(conn, events, now)


def _cancel_run(
    conn: sqlite3.Connection, run_id: RunId, tenant: str | None, reason: str, actor: str, now: float
) -> tuple[Run, list[Event]]:
    found = sr.select_runs(conn, "id = ? AND (? IS NULL OR tenant = ?)", (run_id, tenant, tenant))
    if not found:
        raise NotFound("run", run_id)
    run, events = rn.cancel(found[0], reason, actor, now)
    if events:
        sr.save_run(conn, run)
    return run, append_events(conn, events, now)


# -- reads -------------------------------------------------------------------------------------------
def _list_schedules(conn: sqlite3.Connection, f: ScheduleFilter) -> list[Schedule]:
    where: list[str] = ["1"]
    params: list[Any] = []
    for column, value in (("tenant", f.tenant), ("name", f.name)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if f.enabled is not None:
        where.append("enabled = ?")
        params.append(int(f.enabled))
    return sr.select_schedules(conn, f"{' AND '.join(where)} ORDER BY tenant, name LIMIT ?", [*params, f.limit])


def _list_runs(conn: sqlite3.Connection, f: RunFilter) -> list[Run]:
    where: list[str] = ["1"]
    params: list[Any] = []
    simple: list[tuple[str, Any]] = [
        ("tenant = ?", f.tenant),
        ("schedule_id = ?", f.schedule_id),
        ("trigger = ?", f.trigger.value if f.trigger else None),
        ("created_at >= ?", f.created_after),
        ("created_at < ?", f.created_before),
        ("id < ?", f.before_id),
    ]
    for term, value in simple:
        if value is not None:
            where.append(term)
            params.append(value)
    if f.states:
        where.append(f"state IN ({', '.join('?' * len(f.states))})")
        params.extend(s.value for s in f.states)
    return sr.select_runs(conn, f"{' AND '.join(where)} ORDER BY id DESC LIMIT ?", [*params, f.limit])


def _waiting_runs(conn: sqlite3.Connection, limit: int) -> list[Run]:
    """The oldest planning run of each schedule that has no run queued or running."""
    return sr.select_runs(
        conn,
        "state = 'planning' AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.schedule_id = runs.schedule_id AND "
        "(o.state = 'queued' OR o.state = 'running' OR (o.state = 'planning' AND o.id < runs.id))) "
        "ORDER BY id LIMIT ?",
        (limit,),
    )


def _prune_runs(conn: sqlite3.Connection, before: float, limit: int) -> int:
    ids = json_list(
        r[0]
        for r in conn.execute(
            "SELECT id FROM runs WHERE finished_at < ? AND state IN ('completed', 'cancelled', 'error') "
            "ORDER BY finished_at LIMIT ?",
            (before, limit),
        )
    )
    conn.execute("DELETE FROM run_jobs WHERE run_id IN (SELECT value FROM json_each(?))", (ids,))
    runs = conn.execute("DELETE FROM runs WHERE id IN (SELECT value FROM json_each(?))", (ids,)).rowcount
    ticks = conn.execute(
        "DELETE FROM schedule_ticks WHERE (schedule_id, tick_ms) IN "
        "(SELECT schedule_id, tick_ms FROM schedule_ticks WHERE fired_at < ? ORDER BY fired_at LIMIT ?)",
        (before, limit),
    ).rowcount
    return runs + ticks


class SqliteScheduling(SqliteSignatures):
    """Both scheduling ports on a :class:`SqliteStore` (its thread, connection and event log)."""

    def __init__(self, store: SqliteStore) -> None:
        super().__init__(store)

    # -- schedules ----------------------------------------------------------------------------------
    async def insert_schedule(self, schedule: Schedule, event: NewEvent) -> tuple[Schedule, list[Event]]:
        return schedule, await self._store._write(lambda c: _insert_schedule(c, schedule, event))

    async def update_schedule(
        self, schedule: Schedule, expected_version: int, event: NewEvent
    ) -> tuple[Schedule, list[Event]]:
        return schedule, await self._store._write(lambda c: _update_schedule(c, schedule, expected_version, event))

    async def delete_schedule(
        self, schedule_id: ScheduleId, tenant: str | None, now: float, event: NewEvent
    ) -> list[Event]:
        return await self._store._write(lambda c: _delete_schedule(c, schedule_id, tenant, now, event))

    async def get_schedules(self, ids: Sequence[ScheduleId], tenant: str | None = None) -> list[Schedule]:
        found = await self._store._read(
            lambda c: sr.select_schedules(c, "id IN (SELECT value FROM json_each(?))", (json_list(ids),))
        )
        by_id = {s.id: s for s in found}
        return [s for i in ids if (s := by_id.get(i)) is not None and (tenant is None or s.tenant == tenant)]

    async def find_schedule(self, tenant: str, name: str) -> Schedule | None:
        found = await self._store._read(lambda c: sr.select_schedules(c, "tenant = ? AND name = ?", (tenant, name)))
        return found[0] if found else None

    async def list_schedules(self, filter: ScheduleFilter) -> list[Schedule]:
        return await self._store._read(lambda c: _list_schedules(c, filter))

    async def due_schedules(self, now: float, limit: int) -> list[Schedule]:
        where = "next_fire_at IS NOT NULL AND next_fire_at <= ? ORDER BY next_fire_at, id LIMIT ?"
        return await self._store._read(lambda c: sr.select_schedules(c, where, (now, limit)))

    async def prune_runs(self, before: float, limit: int) -> int:
        return await self._store._write(lambda c: _prune_runs(c, before, limit))

    async def next_fire_at(self) -> float | None:
        def read(c: sqlite3.Connection) -> float | None:
            value = c.execute("SELECT min(next_fire_at) FROM schedules WHERE next_fire_at IS NOT NULL").fetchone()[0]
            return None if value is None else float(value)

        return await self._store._read(read)

    # -- firing -------------------------------------------------------------------------------------
    async def fire_ticks(self, claim: TickClaim, now: float) -> Fired | None:
        return await self._store._write(lambda c: _fire_ticks(c, claim, now))

    async def insert_run(self, planned: PlannedRun, now: float, event: NewEvent | None = None) -> Fired:
        return await self._store._write(lambda c: _insert_run(c, planned, now, event))

    async def waiting_runs(self, limit: int) -> list[Run]:
        return await self._store._read(lambda c: _waiting_runs(c, limit))

    async def plan_waiting_run(self, planned: PlannedRun, now: float) -> Fired | None:
        return await self._store._write(lambda c: _plan_waiting_run(c, planned, now))

    # -- progress -----------------------------------------------------------------------------------
    async def start_runs(self, ids: Sequence[RunId], now: float) -> list[Event]:
        if not ids:
            return []
        return await self._store._write(lambda c: _start_runs(c, ids, now))

    async def record_outcomes(self, outcomes: Sequence[JobOutcome], now: float) -> list[Event]:
        if not outcomes:
            return []
        return await self._store._write(lambda c: _record_outcomes(c, outcomes, now))

    async def cancel_run(
        self, run_id: RunId, tenant: str | None, reason: str, actor: str, now: float
    ) -> tuple[Run, list[Event]]:
        return await self._store._write(lambda c: _cancel_run(c, run_id, tenant, reason, actor, now))

    # -- reads --------------------------------------------------------------------------------------
    async def get_runs(self, ids: Sequence[RunId], tenant: str | None = None) -> list[Run]:
        def read(c: sqlite3.Connection) -> dict[str, Run]:
            runs = sr.select_runs_with_data(c, "id IN (SELECT value FROM json_each(?))", (json_list(ids),))
            return {r.id: r for r in runs}

        found = await self._store._read(read)
        return [r for i in ids if (r := found.get(i)) is not None and (tenant is None or r.tenant == tenant)]

    async def list_runs(self, filter: RunFilter) -> list[Run]:
        return await self._store._read(lambda c: _list_runs(c, filter))

    async def run_segments(self, run_id: RunId) -> list[Segment]:
        def read(c: sqlite3.Connection) -> list[Segment]:
            sql = f"SELECT {SEGMENT_COLUMNS} FROM run_jobs WHERE run_id = ? ORDER BY segment"
            return [segment_from_row(r) for r in c.execute(sql, (run_id,))]

        return await self._store._read(read)

    async def active_runs(self, limit: int, after_id: RunId | None = None) -> list[Run]:
        where = f"{_BUSY} AND id > ? ORDER BY id LIMIT ?"
        return await self._store._read(lambda c: sr.select_runs(c, where, (after_id or "", limit)))


if TYPE_CHECKING:

    def _conforms(s: SqliteScheduling) -> SchedulingStore:  # mypy checks the class against both ports here
        return s
