"""Dependency edges: unblocking dependents when their dependencies have all succeeded, and cancelling
them, transitively, when one ended dead or cancelled. Runs inside the caller's write transaction.

The events come in the parity oracle's order, which is causal: a job's own event is followed by those of
the dependents it released or cancelled (depth first for a cancel cascade), children by id.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from jobengine.core import transitions as tr
from jobengine.core.ids import JobId
from jobengine.core.models import Job, NewEvent

from .rows import jobs_by_id, json_list, save_jobs, select_jobs


def unblock_dependents(
    conn: sqlite3.Connection, parent_ids: Sequence[JobId], now: float
) -> dict[JobId, tuple[list[Job], list[NewEvent]]]:
    """Blocked dependents of the just-succeeded parents (in the order they succeeded) whose dependencies
    have now all succeeded become runnable. Returned under the parent that released each one: the last
    of its dependencies in ``parent_ids``.

    A dependency that no longer exists counts as succeeded: retention deletes only terminal jobs, and a
    dependency that ended dead or cancelled would already have cancelled this (still blocked) job.
    """
    if not parent_ids:
        return {}
    edges = conn.execute(
        "SELECT d.depends_on, d.job_id FROM job_deps d JOIN jobs j ON j.id = d.job_id "
        "WHERE d.depends_on IN (SELECT value FROM json_each(?)) AND j.state = 'blocked'",
        (json_list(parent_ids),),
    ).fetchall()
    if not edges:
        return {}
    position = {p: i for i, p in enumerate(parent_ids)}
    released_by: dict[str, JobId] = {}
    for parent, child in edges:
        if child not in released_by or position[parent] > position[released_by[child]]:
            released_by[child] = parent
    # One unfinished dependency is enough to keep a child waiting. They are looked for from the last
    # position down: dependencies tend to end in the order they were listed (workers claim oldest first),
    # so a wide fan-in finds one at once instead of reading every edge each time one of its parents ends.
    waiting = {
        r[0]
        for r in conn.execute(
            # A scalar subquery, not EXISTS: SQLite drops the ORDER BY of an EXISTS and scans upwards.
            "SELECT value FROM json_each(?) WHERE (SELECT d.position FROM job_deps d JOIN jobs p "
            "ON p.id = d.depends_on WHERE d.job_id = json_each.value "
            "AND NOT (p.state = 'succeeded' OR (p.state = 'stale' AND p.outcome = 'succeeded')) "
            "ORDER BY d.position DESC LIMIT 1) IS NOT NULL",
            (json_list(released_by),),
        )
    }
    ready = jobs_by_id(conn, [c for c in released_by if c not in waiting])
    changes: list[tuple[Job, Job]] = []
    out: dict[JobId, tuple[list[Job], list[NewEvent]]] = {}
    for child_id in sorted(ready):
        child = ready[child_id]
        unblocked, event = tr.unblock(child, now)
        changes.append((child, unblocked))
        jobs, events = out.setdefault(released_by[child_id], ([], []))
        jobs.append(unblocked)
        events.append(event)
    save_jobs(conn, changes)
    return out


def cancel_dependents(conn: sqlite3.Connection, root: Job, now: float) -> tuple[list[Job], list[NewEvent]]:
    """Cancel the blocked dependents of ``root`` (which ended dead or cancelled), transitively.

    One small indexed query per job that ends: cascades are rare and short, and walking them as the
    parity oracle does keeps reasons and event order identical.
    """
    jobs: list[Job] = []
    events: list[NewEvent] = []
    stack = [root]
    while stack:
        parent = stack.pop()
        children = select_jobs(
            conn,
            "jobs.state = 'blocked' AND jobs.id IN (SELECT job_id FROM job_deps WHERE depends_on = ?) ORDER BY jobs.id",
            (parent.id,),
        )
        changes: list[tuple[Job, Job]] = []
        for child in children:
            cancelled, event = tr.cancel(child, f"dependency {parent.id} ended {parent.state.value}", now)
            changes.append((child, cancelled))
            jobs.append(cancelled)
            events.append(event)
            stack.append(cancelled)
        save_jobs(conn, changes)
    return jobs, events
