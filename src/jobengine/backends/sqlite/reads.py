"""The read side of the store: single statements in autocommit mode, each a consistent WAL snapshot."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from jobengine.backends.sql.base import conditions, marks
from jobengine.core.ids import prefix_range
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
    """With a tenant, each state is read as its own newest-first range of ``jobs_list`` (tenant, state, id),
    ``limit`` rows at most, and only those few rows are merged: a single query over several states (or
    all of them) would have to sort every job of the tenant to find the newest ``limit``. Without a
    tenant (an operator's view) the primary key is walked backwards.
    """
    more, params = conditions(
        ("queue = ?", f.queue), ("task = ?", f.task), ("id < ?", f.before_id), ("created_at > ?", f.created_after),
        ("created_at < ?", f.created_before), ("instr(payload, ?) > 0", f.payload_text), base="",
    )  # fmt: skip
    if f.id_prefix is not None:
        more, params = more + " AND id >= ? AND id < ?", [*params, *prefix_range(f.id_prefix)]
    if f.tenant is None:
        if f.states:
            more += f" AND state IN ({marks(len(f.states))})"
            params += [s.value for s in f.states]
        return select_jobs(conn, f"1{more} ORDER BY jobs.id DESC LIMIT ?", [*params, f.limit])
    states = list(dict.fromkeys(f.states)) if f.states else list(JobState)
    union = " UNION ALL ".join(
        f"SELECT id FROM (SELECT id FROM jobs WHERE tenant = ? AND state = ?{more} ORDER BY id DESC LIMIT ?)"
        for _ in states
    )
    args = [a for state in states for a in (f.tenant, state.value, *params, f.limit)]
    return select_jobs(conn, f"jobs.id IN ({union}) ORDER BY jobs.id DESC LIMIT ?", [*args, f.limit])


def next_run_at(conn: sqlite3.Connection, queues: Sequence[str], tasks: Sequence[str] | None = None) -> float | None:
    # Only jobs of ``tasks``: one the asking worker cannot run must not keep it awake.
    if not queues or (tasks is not None and not tasks):
        return None
    sql = f"SELECT min(run_at) FROM jobs WHERE {RUNNABLE_SQL} AND queue IN ({marks(len(queues))})"
    args = list(queues)
    if tasks is not None:
        sql += f" AND task IN ({marks(len(tasks))})"
        args += tasks
    row = conn.execute(sql, args)
    value = row.fetchone()[0]
    return None if value is None else float(value)
