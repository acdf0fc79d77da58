"""The read side of the store: single statements in autocommit mode, each a consistent WAL snapshot."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from jobengine.core.models import Job, JobFilter
from jobengine.core.states import JobState

from .rows import RUNNABLE_SQL, select_jobs


def expired_jobs(conn: sqlite3.Connection, now: float, limit: int) -> list[Job]:
    # Longest expired first, in jobs_lease order: ordering by id instead would let the planner walk the
    # whole primary key to avoid a sort.
    return select_jobs(
        conn,
        "jobs.state = 'running' AND jobs.lease_expires_at < ? ORDER BY jobs.lease_expires_at, jobs.id LIMIT ?",
        (now, limit),
    )


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
        filters.append("queue = ?")
        params.append(f.queue)
    if f.task is not None:
        filters.append("task = ?")
        params.append(f.task)
    if f.before_id is not None:
        filters.append("id < ?")
        params.append(f.before_id)
    if f.tenant is None:
        where = list(filters)
        args = list(params)
        if f.states:
            where.append(f"state IN ({', '.join('?' * len(f.states))})")
            args.extend(s.value for s in f.states)
        clause = " AND ".join(f"jobs.{w}" for w in where) if where else "1"
        return select_jobs(conn, f"{clause} ORDER BY jobs.id DESC LIMIT ?", [*args, f.limit])
    states = list(dict.fromkeys(f.states)) if f.states else list(JobState)
    branch = " AND ".join(["tenant = ?", "state = ?", *filters])
    union = " UNION ALL ".join(
        f"SELECT id FROM (SELECT id FROM jobs WHERE {branch} ORDER BY id DESC LIMIT ?)" for _ in states
    )
    args = [a for state in states for a in (f.tenant, state.value, *params, f.limit)]
    return select_jobs(conn, f"jobs.id IN ({union}) ORDER BY jobs.id DESC LIMIT ?", [*args, f.limit])


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
