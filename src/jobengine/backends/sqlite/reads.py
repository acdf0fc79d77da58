"""The read side of the store: single statements in autocommit mode, each a consistent WAL snapshot."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from jobengine.core.ids import JobId, prefix_range
from jobengine.core.models import Event, Job, JobFilter
from jobengine.core.states import JobState

from .rows import EVENT_COLUMNS, RUNNABLE_SQL, event_from_row, jobs_by_id, select_jobs


def expired_jobs(conn: sqlite3.Connection, now: float, limit: int) -> list[Job]:
    # Longest expired first, in jobs_lease order: ordering by id instead would let the planner walk the
    # whole primary key to avoid a sort.
    return select_jobs(
        conn,
        "jobs.state = 'running' AND jobs.lease_expires_at < ? ORDER BY jobs.lease_expires_at, jobs.id LIMIT ?",
        (now, limit),
    )


def get_jobs(conn: sqlite3.Connection, ids: Sequence[JobId], tenant: str | None) -> list[Job]:
    """In the order asked for; unknown ids and other tenants' jobs are left out."""
    found = jobs_by_id(conn, ids)
    return [job for i in ids if (job := found.get(i)) is not None and (tenant is None or job.tenant == tenant)]


def list_jobs(conn: sqlite3.Connection, f: JobFilter) -> list[Job]:
    """Newest first.

    With a tenant, each state is read as its own newest-first range of ``jobs_list`` (tenant, state, id),
    ``limit`` rows at most, and only those few rows are merged: a single query over several states (or
    all of them) would have to sort every job of the tenant to find the newest ``limit``. Without a
    tenant (an operator's view) the primary key is walked backwards.
    """
    filters: list[str] = []
    params: list[Any] = []
    if f.queue is not None:
        filters.append("jobs.queue = ?")
        params.append(f.queue)
    if f.task is not None:
        filters.append("jobs.task = ?")
        params.append(f.task)
    if f.before_id is not None:
        filters.append("jobs.id < ?")
        params.append(f.before_id)
    if f.id_prefix is not None:
        filters.append("jobs.id >= ? AND jobs.id < ?")
        params.extend(prefix_range(f.id_prefix))
    if f.created_after is not None:
        filters.append("jobs.created_at > ?")
        params.append(f.created_after)
    if f.created_before is not None:
        filters.append("jobs.created_at < ?")
        params.append(f.created_before)
    if f.payload_text is not None:
        filters.append("instr(jobs.payload, ?) > 0")
        params.append(f.payload_text)
    if f.tenant is None:
        where = list(filters)
        args = list(params)
        if f.states:
            where.append(f"jobs.state IN ({', '.join('?' * len(f.states))})")
            args.extend(s.value for s in f.states)
        clause = " AND ".join(where) if where else "1"
        return select_jobs(conn, f"{clause} ORDER BY jobs.id DESC LIMIT ?", [*args, f.limit])
    states = list(dict.fromkeys(f.states)) if f.states else list(JobState)
    branch = " AND ".join(["jobs.tenant = ?", "jobs.state = ?", *filters])
    union = " UNION ALL ".join(
        f"SELECT id FROM (SELECT id FROM jobs WHERE {branch} ORDER BY id DESC LIMIT ?)" for _ in states
    )
    args = [a for state in states for a in (f.tenant, state.value, *params, f.limit)]
    return select_jobs(conn, f"jobs.id IN ({union}) ORDER BY jobs.id DESC LIMIT ?", [*args, f.limit])


def count_jobs(conn: sqlite3.Connection, tenant: str | None) -> dict[tuple[str, JobState], int]:
    if tenant is None:
        rows = conn.execute("SELECT queue, state, count(*) FROM jobs GROUP BY queue, state")
    else:
        rows = conn.execute("SELECT queue, state, count(*) FROM jobs WHERE tenant = ? GROUP BY queue, state", (tenant,))
    return {(r[0], JobState(r[1])): r[2] for r in rows}


def next_run_at(conn: sqlite3.Connection, queues: Sequence[str], tasks: Sequence[str] | None = None) -> float | None:
    """The earliest run_at among runnable jobs of ``queues`` (and of ``tasks``: one the asking worker cannot
    run must not keep it awake)."""
    if not queues or (tasks is not None and not tasks):
        return None
    marks = ", ".join("?" * len(queues))
    sql = f"SELECT min(run_at) FROM jobs WHERE {RUNNABLE_SQL} AND queue IN ({marks})"
    args = list(queues)
    if tasks is not None:
        sql += f" AND task IN ({', '.join('?' * len(tasks))})"
        args += tasks
    row = conn.execute(sql, args)
    value = row.fetchone()[0]
    return None if value is None else float(value)


def list_events(
    conn: sqlite3.Connection, after_id: int, limit: int, job_id: JobId | None, tenant: str | None
) -> list[Event]:
    where = ["id > ?"]
    params: list[Any] = [after_id]
    if job_id is not None:
        where.append("job_id = ?")
        params.append(job_id)
    if tenant is not None:
        where.append("tenant = ?")
        params.append(tenant)
    params.append(limit)
    sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY id LIMIT ?"
    return [event_from_row(r) for r in conn.execute(sql, params)]
