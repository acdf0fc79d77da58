"""The scheduling ports (schedules, ticks, runs and their segments, the cursors of run streams; tables:
migrations ``0002_scheduler``, ``0008_run_retention``, ``0011_sessions_hooks``, ``0012_run_cursors``).
Every mutating call is one transaction, so a tick's ledger row, its run, the run's jobs (the store's own
insert) and their events commit together; so do a run's last outcome and the move of its stream's cursor.

Exactly once (see ``ports/schedules.py``): a claim first moves its schedule's cursor only if version and
cursor are still as the scheduler read them (PostgreSQL's row lock serialises concurrent claims of one
schedule: the loser re-checks the WHERE clause on the new row version and updates nothing; SQLite's
writers serialise on the write lock), then inserts each tick under the primary key (schedule_id, tick_ms)
with ``ON CONFLICT DO NOTHING``; only a tick whose row went in gets a run.

Failure policy: writes are not retried on a lost connection (whether the commit happened is unknown); the
caller sees StoreUnavailable and the next scheduler pass finds the cursor moved, or fires the tick.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from jobengine.backends.scheduling_rows import (
    RUN_COLUMNS,
    RUN_WIDTH,
    SCHEDULE_WRITE_COLUMNS,
    SEGMENT_COLUMNS,
    TRIGGER_DATA,
    run_from_row,
    run_values,
    schedule_from_row,
    schedule_values,
    segment_from_row,
    trigger_data_value,
    with_mode,
    with_trigger_data,
)
from jobengine.core import codec, firing
from jobengine.core import runs as rn
from jobengine.core.ids import RunId, ScheduleId
from jobengine.core.models import Event, Json, NewEvent
from jobengine.core.run_modes import RunMode
from jobengine.core.run_requests import later
from jobengine.core.runs import JobOutcome, Run, RunFilter, RunState, Segment
from jobengine.core.schedules import Schedule, ScheduleFilter
from jobengine.errors import AlreadyExists, IllegalState, NotFound
from jobengine.ports.schedules import Fired, PlannedRun, RunCursor, TickClaim

from .base import Tx, conditions, marks
from .graphs import write_graph
from .signatures import SqlSignatures

if TYPE_CHECKING:
    from jobengine.ports.schedules import SchedulingStore

_SCHEDULES: Final = (
    "SELECT id, spec{text}, version, cursor, next_fire_at, created_at, updated_at, created_by, updated_by "
    "FROM {s}schedules"
)
_SCHEDULE_MARKS: Final = ("?",) * 3 + ("{json}",) + ("?",) * 8  # the spec is JSON
_RUN_SETS: Final = ", ".join(f"{c} = ?" for c in RUN_COLUMNS.split(", ")[1:])
# As in SQLite's partial index runs_active (PostgreSQL's planner proves an IN list from these too).
_ACTIVE: Final = "(state = 'planning' OR state = 'queued' OR state = 'running')"
_BUSY: Final = "(state = 'queued' OR state = 'running')"


async def _schedules(tx: Tx, where: str, params: Sequence[Any]) -> list[Schedule]:
    return [schedule_from_row(r) for r in await tx.rows(f"{_SCHEDULES} WHERE {where}", params)]


async def _runs(tx: Tx, where: str, params: Sequence[Any]) -> list[Run]:
    columns = ", ".join(f"r.{c}" for c in RUN_COLUMNS.split(", "))
    rows = await tx.rows(f"SELECT {columns}, r.mode FROM {{s}}runs r WHERE {where}", params)
    return [with_mode(run_from_row(row), row[RUN_WIDTH]) for row in rows]


async def _locked_runs(tx: Tx, ids: Sequence[str]) -> dict[str, Run]:
    ids = sorted(set(ids))
    return {r.id: r for r in await _runs(tx, f"id IN ({marks(len(ids))}) ORDER BY id{{lock}}", ids)} if ids else {}


async def _save_runs(tx: Tx, runs: Sequence[Run]) -> None:
    """Write back every column of each run but its id (locked: nobody changed it meanwhile)."""
    await tx.many(f"UPDATE {{s}}runs SET {_RUN_SETS} WHERE id = ?", [(*run_values(r)[1:], r.id) for r in runs])


async def _has_run(tx: Tx, schedule_id: str, states: str) -> bool:
    return bool(await tx.rows(f"SELECT 1 FROM {{s}}runs WHERE schedule_id = ? AND {states} LIMIT 1", (schedule_id,)))


async def _write_run(tx: Tx, planned: PlannedRun, now: float, out: Fired, *, update: bool) -> None:
    run = planned.run
    if update:
        await _save_runs(tx, [run])
    else:
        sql = f"INSERT INTO {{s}}runs ({RUN_COLUMNS}, {TRIGGER_DATA}) VALUES ({marks(RUN_WIDTH + 1)})"
        await tx.run(sql, (*run_values(run), trigger_data_value(run)), duplicate=AlreadyExists("run", run.id))
        if run.mode is not None:
            await _set_mode(tx, run, planned.stream)
    if planned.jobs:
        phases = list(planned.phases) or [()] * len(planned.jobs)
        if planned.graph is not None:
            inserted = await write_graph(tx, planned.graph, planned.jobs, phases, now)
        else:
            inserted = await tx.insert_jobs(planned.jobs, now, phases)
        out.jobs.extend(inserted.jobs)
        out.events.extend(inserted.events)
        items = planned.items
        rows = [(job.id, run.id, i, items[i] if i < len(items) else 0) for i, job in enumerate(inserted.jobs)]
        await tx.many("INSERT INTO {s}run_jobs (job_id, run_id, segment, items) VALUES (?, ?, ?, ?)", rows)
    if planned.stream is not None and planned.cursor_to is not None:
        if run.state is RunState.COMPLETED:
            await _advance(tx, run.tenant, planned.stream, planned.cursor_to, run.id, now)
        elif not run.ended:
            await tx.run(
                "INSERT INTO {s}run_cursor_moves (run_id, tenant, stream, value) VALUES (?, ?, ?, ?)",
                (run.id, run.tenant, planned.stream, codec.dumps(planned.cursor_to, "cursor")),
            )
    out.runs.append(run)
    out.events.extend(await tx.events([rn.run_event(rn.RUN_PLANNED if update else rn.RUN_CREATED, run)], now))


def _exclusive(run: Run, stream: str | None) -> bool:
    """Whether ``run`` takes its stream: an incremental run that moves the stream's cursor."""
    return run.mode == RunMode.INCREMENTAL.value and stream is not None and run.parent_id is None


async def _stream_busy(tx: Tx, run: Run, stream: str | None) -> str | None:
    """Why ``run`` cannot take its stream now (another unfinished incremental run of it), or None."""
    if not _exclusive(run, stream):
        return None
    found = await tx.rows(
        f"SELECT id, state FROM {{s}}runs WHERE tenant = ? AND schedule_id = ? AND mode = 'incremental' "
        f"AND parent_id IS NULL AND {_ACTIVE} AND id <> ? LIMIT 1",
        (run.tenant, run.schedule_id, run.id),
    )
    if not found:
        return None
    return (
        f"stream {stream!r} already has incremental run {found[0][0]} {found[0][1]}; the next one "
        "starts once it ended (wait for it or cancel it)"
    )


async def _set_mode(tx: Tx, run: Run, stream: str | None) -> None:
    """Record the run's mode. An incremental run that moves its stream's cursor takes the stream (index
    ``runs_one_incremental``): IllegalState while another one is unfinished. The read names that run; the
    index settles two that start at the same moment (PostgreSQL: the second waits for the first's commit,
    then its write fails)."""
    exclusive = _exclusive(run, stream)
    busy = IllegalState(f"stream {stream!r} already has an unfinished incremental run; wait for it or cancel it")
    reason = await _stream_busy(tx, run, stream)
    if reason is not None:
        raise IllegalState(reason)
    await tx.run("UPDATE {s}runs SET mode = ? WHERE id = ?", (run.mode, run.id), duplicate=busy if exclusive else None)


async def _advance(tx: Tx, tenant: str, stream: str, value: Json, run_id: str, now: float) -> None:
    """Move the stream's cursor up to ``value`` (never down: runs may succeed out of order)."""
    found = await tx.rows("SELECT value FROM {s}run_cursors WHERE tenant = ? AND stream = ?{lock}", (tenant, stream))
    if not found:
        await tx.run(
            "INSERT INTO {s}run_cursors (tenant, stream, value, run_id, updated_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (tenant, stream, codec.dumps(value, "cursor"), run_id, now),
        )
    elif later(value, codec.loads(found[0][0])):
        await tx.run(
            "UPDATE {s}run_cursors SET value = ?, run_id = ?, updated_at = ? WHERE tenant = ? AND stream = ?",
            (codec.dumps(value, "cursor"), run_id, now, tenant, stream),
        )


async def _apply_moves(tx: Tx, runs: Sequence[Run], now: float) -> None:
    """The cursor moves of runs whose every segment succeeded."""
    ids = [r.id for r in runs if r.state is RunState.COMPLETED and r.summary.succeeded == r.summary.total]
    if not ids:
        return
    where = f"run_id IN ({marks(len(ids))})"
    for run_id, tenant, stream, value in await tx.rows(
        f"SELECT run_id, tenant, stream, value FROM {{s}}run_cursor_moves WHERE {where} ORDER BY run_id", ids
    ):
        await _advance(tx, tenant, stream, codec.loads(value), run_id, now)
    await tx.run(f"DELETE FROM {{s}}run_cursor_moves WHERE {where}", ids)


async def _fire_ticks(tx: Tx, claim: TickClaim, now: float) -> Fired | None:
    row = await tx.rows(
        "UPDATE {s}schedules SET cursor = ?, next_fire_at = ? "
        "WHERE id = ? AND version = ? AND cursor = ? AND enabled = {true} RETURNING tenant",
        (claim.new_cursor, claim.next_fire_at, claim.schedule_id, claim.version, claim.cursor),
    )
    if not row:
        return None  # changed, paused, deleted, or another scheduler claimed these ticks first
    tenant = row[0][0]
    out = Fired()
    for planned in claim.runs:
        tick = planned.run.tick
        assert tick is not None
        # A run request's run belongs to its stream (its schedule_id): the previous run is the stream's.
        action = firing.overlap_action(claim.overlap, await _has_run(tx, planned.run.schedule_id, _ACTIVE))
        # An incremental run cannot start while its stream has another: the tick is skipped, saying why.
        busy = await _stream_busy(tx, planned.run, planned.stream)
        if busy is not None:
            action = firing.TickAction.SKIP
        run_id = None if action is firing.TickAction.SKIP else planned.run.id
        taken = await tx.run(
            "INSERT INTO {s}schedule_ticks (schedule_id, tick_ms, run_id, fired_at, fired_by) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (claim.schedule_id, firing.tick_key(tick), run_id, now, claim.fired_by),
        )
        if taken == 0:
            continue  # this tick was fired already: never twice
        if action is firing.TickAction.SKIP:
            out.skipped.append(tick)
            event = firing.skipped_event(tenant, claim.schedule_id, tick, claim.overlap, busy)
            out.events.extend(await tx.events([event], now))
            continue
        if action is firing.TickAction.DEFER:
            planned = PlannedRun(firing.deferred(planned.run))
        await _write_run(tx, planned, now, out, update=False)
    out.events.extend(await tx.events(claim.events, now))
    return out


async def _record_outcomes(tx: Tx, outcomes: Sequence[JobOutcome], now: float) -> list[Event]:
    ids = [o.job_id for o in outcomes]
    rows = await tx.rows(f"SELECT {SEGMENT_COLUMNS} FROM {{s}}run_jobs WHERE job_id IN ({marks(len(ids))})", ids)
    segments = {s.job_id: s for s in map(segment_from_row, rows)}
    runs = await _locked_runs(tx, [s.run_id for s in segments.values()])
    changed: dict[str, Run] = {}
    touched: dict[str, Segment] = {}
    events: list[NewEvent] = []
    for o in outcomes:
        segment = segments.get(o.job_id)
        if segment is None or segment.run_id != o.run_id or o.run_id not in runs:
            continue
        run, segment, new = rn.apply_outcome(runs[o.run_id], segment, o.outcome, o.duration, now)
        runs[run.id] = changed[run.id] = run
        segments[segment.job_id] = touched[segment.job_id] = segment
        events.extend(new)
    await tx.many(
        "UPDATE {s}run_jobs SET outcome = ?, duration = ? WHERE job_id = ?",
        [(s.outcome.value if s.outcome else None, s.duration, s.job_id) for s in touched.values()],
    )
    await _save_runs(tx, list(changed.values()))
    await _apply_moves(tx, list(changed.values()), now)
    return await tx.events(events, now)


async def _prune_runs(tx: Tx, before: float, limit: int) -> int:
    old = await tx.rows(
        "SELECT id FROM {s}runs WHERE finished_at < ? AND state IN ('completed', 'cancelled', 'error') "
        "ORDER BY finished_at LIMIT ?",
        (before, limit),
    )
    ids = [r[0] for r in old]
    runs = 0
    if ids:
        await tx.run(f"DELETE FROM {{s}}run_jobs WHERE run_id IN ({marks(len(ids))})", ids)
        await tx.run(f"DELETE FROM {{s}}run_cursor_moves WHERE run_id IN ({marks(len(ids))})", ids)
        runs = await tx.run(f"DELETE FROM {{s}}runs WHERE id IN ({marks(len(ids))})", ids)
    ticks = await tx.run(
        "DELETE FROM {s}schedule_ticks WHERE (schedule_id, tick_ms) IN "
        "(SELECT schedule_id, tick_ms FROM {s}schedule_ticks WHERE fired_at < ? ORDER BY fired_at LIMIT ?)",
        (before, limit),
    )
    return runs + ticks


class SqlScheduling(SqlSignatures):
    """Both scheduling ports (and the SignatureStore) on a backend's :class:`~jobengine.backends.sql.base.Db`."""

    # -- schedules ----------------------------------------------------------------------------------
    async def insert_schedule(self, schedule: Schedule, event: NewEvent) -> tuple[Schedule, list[Event]]:
        async def op(tx: Tx) -> list[Event]:
            sql = f"INSERT INTO {{s}}schedules ({SCHEDULE_WRITE_COLUMNS}) VALUES ({', '.join(_SCHEDULE_MARKS)})"
            await tx.run(sql, schedule_values(schedule), duplicate=AlreadyExists("schedule", schedule.name))
            return await tx.events([event], schedule.updated_at)

        return schedule, await self.db.write(op, retry=False)

    async def update_schedule(
        self, schedule: Schedule, expected_version: int, event: NewEvent
    ) -> tuple[Schedule, list[Event]]:
        columns = SCHEDULE_WRITE_COLUMNS.split(", ")
        sets = ", ".join(f"{c} = {m}" for c, m in zip(columns[1:], _SCHEDULE_MARKS[1:], strict=True))

        async def op(tx: Tx) -> list[Event]:
            args = (*schedule_values(schedule)[1:], schedule.id, expected_version)
            sql = f"UPDATE {{s}}schedules SET {sets} WHERE id = ? AND version = ?"
            if await tx.run(sql, args, duplicate=AlreadyExists("schedule", schedule.name)) == 0:
                if not await tx.rows("SELECT 1 FROM {s}schedules WHERE id = ?", (schedule.id,)):
                    raise NotFound("schedule", schedule.id)
                raise IllegalState(f"schedule {schedule.id} changed meanwhile; read it again and retry")
            return await tx.events([event], schedule.updated_at)

        return schedule, await self.db.write(op, retry=False)

    async def delete_schedule(
        self, schedule_id: ScheduleId, tenant: str | None, now: float, event: NewEvent
    ) -> list[Event]:
        sql, args = "DELETE FROM {s}schedules WHERE id = ?", [str(schedule_id)]
        if tenant is not None:
            sql, args = sql + " AND tenant = ?", [schedule_id, tenant]

        async def op(tx: Tx) -> list[Event]:
            if await tx.run(sql, args) == 0:
                raise NotFound("schedule", schedule_id)
            return await tx.events([event], now)

        return await self.db.write(op, retry=False)

    async def get_schedules(self, ids: Sequence[ScheduleId], tenant: str | None = None) -> list[Schedule]:
        if not ids:
            return []
        found = await self.db.read(lambda tx: _schedules(tx, f"id IN ({marks(len(ids))})", ids))
        by_id = {s.id: s for s in found}
        return [s for i in ids if (s := by_id.get(i)) is not None and (tenant is None or s.tenant == tenant)]

    async def find_schedule(self, tenant: str, name: str) -> Schedule | None:
        found = await self.db.read(lambda tx: _schedules(tx, "tenant = ? AND name = ?", (tenant, name)))
        return found[0] if found else None

    async def list_schedules(self, filter: ScheduleFilter) -> list[Schedule]:
        f = filter
        clause, params = conditions(("tenant = ?", f.tenant), ("name = ?", f.name), ("enabled = ?", f.enabled))
        sql = f"{clause} ORDER BY tenant, name LIMIT ?"
        return await self.db.read(lambda tx: _schedules(tx, sql, [*params, f.limit]))

    async def due_schedules(self, now: float, limit: int) -> list[Schedule]:
        where = "next_fire_at IS NOT NULL AND next_fire_at <= ? ORDER BY next_fire_at, id LIMIT ?"
        return await self.db.read(lambda tx: _schedules(tx, where, (now, limit)))

    async def next_fire_at(self) -> float | None:
        sql = "SELECT min(next_fire_at) FROM {s}schedules WHERE next_fire_at IS NOT NULL"
        rows = await self.db.read(lambda tx: tx.rows(sql))
        return None if rows[0][0] is None else float(rows[0][0])

    async def prune_runs(self, before: float, limit: int) -> int:
        return await self.db.write(lambda tx: _prune_runs(tx, before, limit), retry=False)

    # -- firing -------------------------------------------------------------------------------------
    async def fire_ticks(self, claim: TickClaim, now: float) -> Fired | None:
        return await self.db.write(lambda tx: _fire_ticks(tx, claim, now), retry=False)

    async def insert_run(self, planned: PlannedRun, now: float, event: NewEvent | None = None) -> Fired:
        async def op(tx: Tx) -> Fired:
            out = Fired()
            await _write_run(tx, planned, now, out, update=False)
            if event is not None:
                out.events.extend(await tx.events([event], now))
            return out

        return await self.db.write(op, retry=False)

    async def waiting_runs(self, limit: int) -> list[Run]:
        """The oldest planning run of each schedule that has no run queued or running."""
        where = (
            "r.state = 'planning' AND NOT EXISTS (SELECT 1 FROM {s}runs o WHERE o.schedule_id = r.schedule_id AND "
            "(o.state IN ('queued', 'running') OR (o.state = 'planning' AND o.id < r.id))) ORDER BY r.id LIMIT ?"
        )
        return await self.db.read(lambda tx: _runs(tx, where, (limit,)))

    async def plan_waiting_run(self, planned: PlannedRun, now: float) -> Fired | None:
        async def op(tx: Tx) -> Fired | None:
            # The schedule's row lock orders this with claims of the same schedule.
            await tx.rows("SELECT 1 FROM {s}schedules WHERE id = ?{lock}", (planned.run.schedule_id,))
            row = await tx.rows("SELECT state, schedule_id FROM {s}runs WHERE id = ?{lock}", (planned.run.id,))
            if not row or row[0][0] != RunState.PLANNING or await _has_run(tx, row[0][1], _BUSY):
                return None
            out = Fired()
            await _write_run(tx, planned, now, out, update=True)
            return out

        return await self.db.write(op, retry=False)

    # -- progress -----------------------------------------------------------------------------------
    async def start_runs(self, ids: Sequence[RunId], now: float) -> list[Event]:
        if not ids:
            return []

        async def op(tx: Tx) -> list[Event]:
            started: list[Run] = []
            events: list[NewEvent] = []
            for run in (await _locked_runs(tx, ids)).values():
                run, new = rn.start(run, now)
                if new:
                    started.append(run)
                    events.extend(new)
            await _save_runs(tx, started)
            return await tx.events(events, now)

        return await self.db.write(op, retry=False)

    async def record_outcomes(self, outcomes: Sequence[JobOutcome], now: float) -> list[Event]:
        if not outcomes:
            return []
        return await self.db.write(lambda tx: _record_outcomes(tx, outcomes, now), retry=False)

    async def cancel_run(
        self, run_id: RunId, tenant: str | None, reason: str, actor: str, now: float
    ) -> tuple[Run, list[Event]]:
        async def op(tx: Tx) -> tuple[Run, list[Event]]:
            run = (await _locked_runs(tx, [run_id])).get(run_id)
            if run is None or (tenant is not None and run.tenant != tenant):
                raise NotFound("run", run_id)
            run, events = rn.cancel(run, reason, actor, now)
            if events:
                await _save_runs(tx, [run])
            return run, await tx.events(events, now)

        return await self.db.write(op, retry=False)

    # -- reads --------------------------------------------------------------------------------------
    async def get_runs(self, ids: Sequence[RunId], tenant: str | None = None) -> list[Run]:
        if not ids:
            return []
        sql = f"SELECT {RUN_COLUMNS}, {TRIGGER_DATA}, mode FROM {{s}}runs WHERE id IN ({marks(len(ids))})"
        rows = await self.db.read(lambda tx: tx.rows(sql, ids))
        found = (with_mode(with_trigger_data(run_from_row(r), r[RUN_WIDTH]), r[RUN_WIDTH + 1]) for r in rows)
        by_id = {r.id: r for r in found}
        return [r for i in ids if (r := by_id.get(i)) is not None and (tenant is None or r.tenant == tenant)]

    async def list_runs(self, filter: RunFilter) -> list[Run]:
        f = filter
        clause, params = conditions(
            ("tenant = ?", f.tenant), ("schedule_id = ?", f.schedule_id),
            ("trigger = ?", f.trigger.value if f.trigger else None), ("created_at >= ?", f.created_after),
            ("created_at < ?", f.created_before), ("id < ?", f.before_id), ("mode = ?", f.mode),
        )  # fmt: skip
        if f.states:
            clause += f" AND state IN ({marks(len(f.states))})"
            params.extend(s.value for s in f.states)
        sql = f"{clause} ORDER BY id DESC LIMIT ?"
        return await self.db.read(lambda tx: _runs(tx, sql, [*params, f.limit]))

    async def run_segments(self, run_id: RunId) -> list[Segment]:
        sql = f"SELECT {SEGMENT_COLUMNS} FROM {{s}}run_jobs WHERE run_id = ? ORDER BY segment"
        return [segment_from_row(r) for r in await self.db.read(lambda tx: tx.rows(sql, (run_id,)))]

    async def get_cursor(self, tenant: str, stream: str) -> RunCursor | None:
        sql = "SELECT value, run_id, updated_at FROM {s}run_cursors WHERE tenant = ? AND stream = ?"
        rows = await self.db.read(lambda tx: tx.rows(sql, (tenant, stream)))
        return RunCursor(codec.loads(rows[0][0]), RunId(rows[0][1]), rows[0][2]) if rows else None

    async def active_runs(self, limit: int, after_id: RunId | None = None) -> list[Run]:
        where = f"{_BUSY} AND id > ? ORDER BY id LIMIT ?"
        return await self.db.read(lambda tx: _runs(tx, where, (after_id or "", limit)))


if TYPE_CHECKING:

    def _conforms(s: SqlScheduling) -> SchedulingStore:  # mypy checks the class against both ports here
        return s
