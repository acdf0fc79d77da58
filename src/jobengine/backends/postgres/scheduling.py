"""The scheduling ports on PostgreSQL. Every mutating call is one transaction on a pooled connection.

Exactly once (see ``ports/schedules.py``): a claim first updates its schedule's row only if version and
cursor are still as read (the row lock serialises concurrent claims of one schedule; the loser re-checks
the WHERE clause on the new row version under READ COMMITTED and updates nothing), then inserts each
tick under the primary key (schedule_id, tick_ms) with ``ON CONFLICT DO NOTHING``; the tick's run, its
jobs (the store's own insert, in a savepoint) and every event commit with it.

Failure policy: inserts are not retried on a lost connection (whether the commit happened is unknown);
the caller sees StoreUnavailable and the next scheduler pass finds the cursor moved, or fires the tick.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from jobengine.backends.postgres.insert import InsertPlan, insert_general
from jobengine.backends.postgres.signatures import PostgresSignatures
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
    with_trigger_data,
)
from jobengine.core import firing
from jobengine.core import runs as rn
from jobengine.core.ids import RunId, ScheduleId
from jobengine.core.models import Event, NewEvent
from jobengine.core.runs import JobOutcome, Run, RunFilter, RunState, Segment
from jobengine.core.schedules import Schedule, ScheduleFilter
from jobengine.errors import AlreadyExists, IllegalState, NotFound
from jobengine.ports.schedules import Fired, PlannedRun, TickClaim

if TYPE_CHECKING:
    from jobengine.ports.schedules import SchedulingStore

Conn = psycopg.AsyncConnection[Any]

_SCHEDULE_SELECT = (
    "SELECT id, spec::text, version, cursor, next_fire_at, created_at, updated_at, created_by, updated_by "
    "FROM {s}schedules"
)
#: Placeholders of SCHEDULE_WRITE_COLUMNS: the spec is JSON text for a jsonb column.
_SCHEDULE_MARKS = ("%s",) * 3 + ("%s::jsonb",) + ("%s",) * 8
_ACTIVE = "state IN ('planning', 'queued', 'running')"
_BUSY = "state IN ('queued', 'running')"


class PostgresScheduling(PostgresSignatures):
    """Both scheduling ports on a :class:`PostgresStore` (its pool and schema)."""

    # -- schedules ----------------------------------------------------------------------------------
    async def insert_schedule(self, schedule: Schedule, event: NewEvent) -> tuple[Schedule, list[Event]]:
        async def fn(conn: Conn) -> list[Event]:
            marks = ", ".join(_SCHEDULE_MARKS)
            try:
                async with conn.transaction():
                    await conn.execute(
                        self._q(f"INSERT INTO {{s}}schedules ({SCHEDULE_WRITE_COLUMNS}) VALUES ({marks})"),
                        _schedule_params(schedule),
                    )
            except psycopg.errors.UniqueViolation:
                raise AlreadyExists("schedule", schedule.name) from None
            return await self._events(conn, [event], schedule.updated_at)

        return schedule, await self._write(fn)

    async def update_schedule(
        self, schedule: Schedule, expected_version: int, event: NewEvent
    ) -> tuple[Schedule, list[Event]]:
        async def fn(conn: Conn) -> list[Event]:
            columns = SCHEDULE_WRITE_COLUMNS.split(", ")
            sets = ", ".join(f"{c} = {m}" for c, m in zip(columns[1:], _SCHEDULE_MARKS[1:], strict=True))
            try:
                async with conn.transaction():
                    cur = await conn.execute(
                        self._q(f"UPDATE {{s}}schedules SET {sets} WHERE id = %s AND version = %s"),
                        (*_schedule_params(schedule)[1:], schedule.id, expected_version),
                    )
            except psycopg.errors.UniqueViolation:
                raise AlreadyExists("schedule", schedule.name) from None
            if cur.rowcount == 0:
                found = await conn.execute(self._q("SELECT 1 FROM {s}schedules WHERE id = %s"), (schedule.id,))
                if await found.fetchone() is None:
                    raise NotFound("schedule", schedule.id)
                raise IllegalState(f"schedule {schedule.id} changed meanwhile; read it again and retry")
            return await self._events(conn, [event], schedule.updated_at)

        return schedule, await self._write(fn)

    async def delete_schedule(
        self, schedule_id: ScheduleId, tenant: str | None, now: float, event: NewEvent
    ) -> list[Event]:
        async def fn(conn: Conn) -> list[Event]:
            cur = await conn.execute(
                self._q("DELETE FROM {s}schedules WHERE id = %s AND (%s::text IS NULL OR tenant = %s)"),
                (schedule_id, tenant, tenant),
            )
            if cur.rowcount == 0:
                raise NotFound("schedule", schedule_id)
            return await self._events(conn, [event], now)

        return await self._write(fn)

    async def _schedules(self, where: str, params: Sequence[Any]) -> list[Schedule]:
        return [schedule_from_row(r) for r in await self._read(f"{_SCHEDULE_SELECT} WHERE {where}", params)]

    async def get_schedules(self, ids: Sequence[ScheduleId], tenant: str | None = None) -> list[Schedule]:
        by_id = {s.id: s for s in await self._schedules("id = ANY(%s)", (list(ids),))}
        return [s for i in ids if (s := by_id.get(i)) is not None and (tenant is None or s.tenant == tenant)]

    async def find_schedule(self, tenant: str, name: str) -> Schedule | None:
        found = await self._schedules("tenant = %s AND name = %s", (tenant, name))
        return found[0] if found else None

    async def list_schedules(self, filter: ScheduleFilter) -> list[Schedule]:
        where = (
            "(%s::text IS NULL OR tenant = %s) AND (%s::text IS NULL OR name = %s) "
            "AND (%s::bool IS NULL OR enabled = %s)"
        )
        f = filter
        params = (f.tenant, f.tenant, f.name, f.name, f.enabled, f.enabled, f.limit)
        return await self._schedules(f"{where} ORDER BY tenant, name LIMIT %s", params)

    async def due_schedules(self, now: float, limit: int) -> list[Schedule]:
        where = "next_fire_at IS NOT NULL AND next_fire_at <= %s ORDER BY next_fire_at, id LIMIT %s"
        return await self._schedules(where, (now, limit))

    async def next_fire_at(self) -> float | None:
        rows = await self._read("SELECT min(next_fire_at) FROM {s}schedules WHERE next_fire_at IS NOT NULL", ())
        return None if rows[0][0] is None else float(rows[0][0])

    # -- firing -------------------------------------------------------------------------------------
    async def _has_run(self, conn: Conn, schedule_id: str, states: str) -> bool:
        cur = await conn.execute(
            self._q(f"SELECT 1 FROM {{s}}runs WHERE schedule_id = %s AND {states} LIMIT 1"), (schedule_id,)
        )
        return await cur.fetchone() is not None

    async def _write_run(self, conn: Conn, planned: PlannedRun, now: float, out: Fired, *, update: bool) -> None:
        run = planned.run
        if update:
            sets = ", ".join(f"{c} = %s" for c in RUN_COLUMNS.split(", ")[1:])
            await conn.execute(self._q(f"UPDATE {{s}}runs SET {sets} WHERE id = %s"), (*_run_params(run)[1:], run.id))
        else:
            marks = ", ".join(["%s"] * (RUN_WIDTH + 1))
            insert = f"INSERT INTO {{s}}runs ({RUN_COLUMNS}, {TRIGGER_DATA}) VALUES ({marks})"
            await conn.execute(self._q(insert), (*_run_params(run), trigger_data_value(run)))
        if planned.jobs:
            phases = list(planned.phases) or [()] * len(planned.jobs)
            plan = InsertPlan.of(planned.jobs, now, phases, None)
            inserted = await insert_general(conn, self._store._q, self._store.channel, plan)
            out.jobs.extend(inserted.jobs)
            out.events.extend(inserted.events)
            await conn.execute(
                self._q(
                    "INSERT INTO {s}run_jobs (job_id, run_id, segment, items) "
                    "SELECT j, %s, o - 1, n FROM unnest(%s::text[], %s::int4[]) WITH ORDINALITY AS x(j, n, o)"
                ),
                (
                    run.id,
                    [j.id for j in inserted.jobs],
                    [*planned.items, *[0] * (len(inserted.jobs) - len(planned.items))],
                ),
            )
        out.runs.append(run)
        event = rn.run_event(rn.RUN_PLANNED if update else rn.RUN_CREATED, run)
        out.events.extend(await self._events(conn, [event], now))

    async def fire_ticks(self, claim: TickClaim, now: float) -> Fired | None:
        async def fn(conn: Conn) -> Fired | None:
            cur = await conn.execute(
                self._q(
                    "UPDATE {s}schedules SET cursor = %s, next_fire_at = %s "
                    "WHERE id = %s AND version = %s AND cursor = %s AND enabled RETURNING tenant"
                ),
                (claim.new_cursor, claim.next_fire_at, claim.schedule_id, claim.version, claim.cursor),
            )
            row = await cur.fetchone()
            if row is None:
                return None
            tenant = row[0]
            out = Fired()
            for planned in claim.runs:
                tick = planned.run.tick
                assert tick is not None
                action = firing.overlap_action(claim.overlap, await self._has_run(conn, claim.schedule_id, _ACTIVE))
                taken = await conn.execute(
                    self._q(
                        "INSERT INTO {s}schedule_ticks (schedule_id, tick_ms, run_id, fired_at, fired_by) "
                        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
                    ),
                    (
                        claim.schedule_id,
                        firing.tick_key(tick),
                        None if action is firing.TickAction.SKIP else planned.run.id,
                        now,
                        claim.fired_by,
                    ),
                )
                if taken.rowcount == 0:
                    continue  # fired already: never twice
                if action is firing.TickAction.SKIP:
                    out.skipped.append(tick)
                    out.events.extend(
                        await self._events(conn, [firing.skipped_event(tenant, claim.schedule_id, tick)], now)
                    )
                    continue
                if action is firing.TickAction.DEFER:
                    planned = PlannedRun(firing.deferred(planned.run))
                await self._write_run(conn, planned, now, out, update=False)
            out.events.extend(await self._events(conn, claim.events, now))
            return out

        return await self._write(fn)

    async def insert_run(self, planned: PlannedRun, now: float, event: NewEvent | None = None) -> Fired:
        async def fn(conn: Conn) -> Fired:
            out = Fired()
            await self._write_run(conn, planned, now, out, update=False)
            if event is not None:
                out.events.extend(await self._events(conn, [event], now))
            return out

        return await self._write(fn)

    async def waiting_runs(self, limit: int) -> list[Run]:
        where = (
            "r.state = 'planning' AND NOT EXISTS (SELECT 1 FROM {s}runs o WHERE o.schedule_id = r.schedule_id AND "
            "(o.state IN ('queued', 'running') OR (o.state = 'planning' AND o.id < r.id))) ORDER BY r.id LIMIT %s"
        )
        return await self._runs(where, (limit,), alias="r")

    async def plan_waiting_run(self, planned: PlannedRun, now: float) -> Fired | None:
        async def fn(conn: Conn) -> Fired | None:
            # The schedule's row lock orders this with claims of the same schedule.
            await conn.execute(
                self._q("SELECT 1 FROM {s}schedules WHERE id = %s FOR UPDATE"), (planned.run.schedule_id,)
            )
            cur = await conn.execute(
                self._q("SELECT state, schedule_id FROM {s}runs WHERE id = %s FOR UPDATE"), (planned.run.id,)
            )
            row = await cur.fetchone()
            if row is None or row[0] != RunState.PLANNING or await self._has_run(conn, row[1], _BUSY):
                return None
            out = Fired()
            await self._write_run(conn, planned, now, out, update=True)
            return out

        return await self._write(fn)

    # -- progress -----------------------------------------------------------------------------------
    async def _locked_runs(self, conn: Conn, ids: Sequence[str]) -> dict[str, Run]:
        cur = await conn.execute(
            self._q(f"SELECT {RUN_COLUMNS} FROM {{s}}runs WHERE id = ANY(%s) ORDER BY id FOR UPDATE"), (list(ids),)
        )
        return {r.id: r for r in map(run_from_row, await cur.fetchall())}

    async def _save_runs(self, conn: Conn, runs: Sequence[Run]) -> None:
        if runs:
            sets = ", ".join(f"{c} = %s" for c in RUN_COLUMNS.split(", ")[1:])
            async with conn.cursor() as cur:
                await cur.executemany(
                    self._q(f"UPDATE {{s}}runs SET {sets} WHERE id = %s"), [(*_run_params(r)[1:], r.id) for r in runs]
                )

    async def start_runs(self, ids: Sequence[RunId], now: float) -> list[Event]:
        if not ids:
            return []

        async def fn(conn: Conn) -> list[Event]:
            started: list[Run] = []
            events: list[NewEvent] = []
            for run in (await self._locked_runs(conn, sorted(set(ids)))).values():
                run, new = rn.start(run, now)
                if new:
                    started.append(run)
                    events.extend(new)
            await self._save_runs(conn, started)
            return await self._events(conn, events, now)

        return await self._write(fn)

    async def record_outcomes(self, outcomes: Sequence[JobOutcome], now: float) -> list[Event]:
        if not outcomes:
            return []

        async def fn(conn: Conn) -> list[Event]:
            cur = await conn.execute(
                self._q(f"SELECT {SEGMENT_COLUMNS} FROM {{s}}run_jobs WHERE job_id = ANY(%s)"),
                ([o.job_id for o in outcomes],),
            )
            segments = {s.job_id: s for s in map(segment_from_row, await cur.fetchall())}
            runs = await self._locked_runs(conn, sorted({s.run_id for s in segments.values()}))
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
            if touched:
                async with conn.cursor() as c:
                    await c.executemany(
                        self._q("UPDATE {s}run_jobs SET outcome = %s, duration = %s WHERE job_id = %s"),
                        [(s.outcome.value if s.outcome else None, s.duration, s.job_id) for s in touched.values()],
                    )
            await self._save_runs(conn, list(changed.values()))
            return await self._events(conn, events, now)

        return await self._write(fn)

    async def cancel_run(
        self, run_id: RunId, tenant: str | None, reason: str, actor: str, now: float
    ) -> tuple[Run, list[Event]]:
        async def fn(conn: Conn) -> tuple[Run, list[Event]]:
            run = (await self._locked_runs(conn, [run_id])).get(run_id)
            if run is None or (tenant is not None and run.tenant != tenant):
                raise NotFound("run", run_id)
            run, events = rn.cancel(run, reason, actor, now)
            if events:
                await self._save_runs(conn, [run])
            return run, await self._events(conn, events, now)

        return await self._write(fn)

    # -- reads --------------------------------------------------------------------------------------
    async def _runs(self, where: str, params: Sequence[Any], alias: str = "runs") -> list[Run]:
        columns = ", ".join(f"{alias}.{c}" for c in RUN_COLUMNS.split(", "))
        rows = await self._read(f"SELECT {columns} FROM {{s}}runs {alias} WHERE {where}", params)
        return [run_from_row(r) for r in rows]

    async def get_runs(self, ids: Sequence[RunId], tenant: str | None = None) -> list[Run]:
        rows = await self._read(f"SELECT {RUN_COLUMNS}, {TRIGGER_DATA} FROM {{s}}runs WHERE id = ANY(%s)", (list(ids),))
        by_id = {r.id: r for r in (with_trigger_data(run_from_row(row), row[RUN_WIDTH]) for row in rows)}
        return [r for i in ids if (r := by_id.get(i)) is not None and (tenant is None or r.tenant == tenant)]

    async def list_runs(self, filter: RunFilter) -> list[Run]:
        f = filter
        where = (
            "(%s::text IS NULL OR tenant = %s) AND (%s::text IS NULL OR schedule_id = %s) "
            "AND (%s::text IS NULL OR trigger = %s) AND (%s::float8 IS NULL OR created_at >= %s) "
            "AND (%s::float8 IS NULL OR created_at < %s) AND (%s::text IS NULL OR id < %s) "
            "AND (cardinality(%s::text[]) = 0 OR state = ANY(%s::text[])) ORDER BY id DESC LIMIT %s"
        )
        trigger = f.trigger.value if f.trigger else None
        states = [s.value for s in f.states]
        params = (
            f.tenant, f.tenant, f.schedule_id, f.schedule_id, trigger, trigger, f.created_after, f.created_after,
            f.created_before, f.created_before, f.before_id, f.before_id, states, states, f.limit,
        )  # fmt: skip
        return await self._runs(where, params)

    async def prune_runs(self, before: float, limit: int) -> int:
        async def fn(conn: Conn) -> int:
            cur = await conn.execute(self._q(_PRUNE_RUNS), {"before": before, "limit": limit})
            row = await cur.fetchone()
            return int(row[0]) + int(row[1]) if row else 0

        return await self._write(fn)

    async def run_segments(self, run_id: RunId) -> list[Segment]:
        rows = await self._read(
            f"SELECT {SEGMENT_COLUMNS} FROM {{s}}run_jobs WHERE run_id = %s ORDER BY segment", (run_id,)
        )
        return [segment_from_row(r) for r in rows]

    async def active_runs(self, limit: int, after_id: RunId | None = None) -> list[Run]:
        return await self._runs(f"{_BUSY} AND id > %s ORDER BY id LIMIT %s", (after_id or "", limit))


# Ended runs (oldest first) with their segment rows, and tick records, fired before %(before)s.
_PRUNE_RUNS = """WITH old AS (
    SELECT id FROM {s}runs WHERE finished_at < %(before)s AND state IN ('completed', 'cancelled', 'error')
    ORDER BY finished_at LIMIT %(limit)s
), segments AS (
    DELETE FROM {s}run_jobs WHERE run_id IN (SELECT id FROM old)
), runs AS (
    DELETE FROM {s}runs WHERE id IN (SELECT id FROM old) RETURNING 1
), ticks AS (
    DELETE FROM {s}schedule_ticks WHERE (schedule_id, tick_ms) IN (
        SELECT schedule_id, tick_ms FROM {s}schedule_ticks WHERE fired_at < %(before)s ORDER BY fired_at
        LIMIT %(limit)s
    ) RETURNING 1
)
SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM ticks)"""


def _schedule_params(s: Schedule) -> tuple[Any, ...]:
    values = list(schedule_values(s))
    values[4] = bool(values[4])  # enabled is a boolean column here
    return tuple(values)


def _run_params(run: Run) -> tuple[Any, ...]:
    values = list(run_values(run))
    values[11] = bool(values[11])  # no_work
    return tuple(values)


if TYPE_CHECKING:

    def _conforms(s: PostgresScheduling) -> SchedulingStore:  # mypy checks the class against both ports here
        return s
