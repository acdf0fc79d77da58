"""The less frequent transitions (phases, cancel, retry, prune), each run inside one ``BEGIN IMMEDIATE``.

The pattern is the same throughout: read the affected rows (one statement for the whole batch), apply
the pure functions of ``core/transitions.py`` (the one definition of what a transition does, shared with
the parity oracle), write the changed rows back with one ``executemany`` guarded by the row as it was read,
and append the events. Holding the write lock from the first read makes read-decide-write atomic across
processes. The per-job hot path (claim, heartbeat, complete, fail, release) is in ``fenced.py``;
save_phases, fenced as well (running, same token, and the guarded write-back), stays here because a batch
may update one job several times and each update must apply in order.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace

from jobengine.core import events as ev
from jobengine.core import transitions as tr
from jobengine.core.ids import JobId, LeaseToken
from jobengine.core.models import (
    Changed,
    Job,
    NewEvent,
    PhaseUpdate,
    Pruned,
    overall_progress,
)
from jobengine.core.states import JobState

from .deps import cancel_dependents
from .rows import append_events, jobs_by_id, json_list, save_jobs, select_jobs

_RUNNING = JobState.RUNNING


def _held(conn: sqlite3.Connection, ids: Sequence[JobId]) -> dict[JobId, Job]:
    """The running jobs among ``ids``; the caller compares lease tokens."""
    jobs = select_jobs(
        conn, "jobs.id IN (SELECT value FROM json_each(?)) AND jobs.state = 'running'", (json_list(ids),)
    )
    return {j.id: j for j in jobs}


def _holds(job: Job | None, token: LeaseToken) -> bool:
    return job is not None and job.state is _RUNNING and job.lease_token == token


def _changed(conn: sqlite3.Connection, changes: list[tuple[Job, Job]], events: list[NewEvent], now: float) -> Changed:
    save_jobs(conn, changes)
    return Changed([new for _, new in changes], append_events(conn, events, now))


def save_phases(conn: sqlite3.Connection, updates: Sequence[PhaseUpdate], now: float) -> Changed:
    held = _held(conn, [u.job_id for u in updates])
    changes: list[tuple[Job, Job]] = []
    events: list[NewEvent] = []
    for u in updates:
        job = held.get(u.job_id)
        if job is None or not _holds(job, u.token):
            continue
        saved = replace(job, phases=u.phases, progress=overall_progress(u.phases), updated_at=now)
        held[job.id] = saved
        changes.append((job, saved))
        if u.event:
            events.append(ev.job_event(ev.PHASE, saved, {"phase_event": u.event, **(u.event_data or {})}))
    return _changed(conn, changes, events, now)


# -- operator actions -------------------------------------------------------------------------------


def cancel_jobs(conn: sqlite3.Connection, ids: Sequence[JobId], reason: str, now: float, tenant: str | None) -> Changed:
    loaded = {i: j for i, j in jobs_by_id(conn, ids).items() if tenant is None or j.tenant == tenant}
    jobs: list[Job] = []
    events: list[NewEvent] = []
    for job_id in ids:
        job = loaded.get(job_id)
        if job is None or job.terminal:
            continue
        if job.state is _RUNNING:
            if job.cancel_requested:
                continue
            # Only flagged: the worker owns the job until it sees the flag on its next heartbeat.
            flagged = replace(job, cancel_requested=True, reason=reason, updated_at=now)
            save_jobs(conn, [(job, flagged)])
            loaded[job_id] = flagged
            jobs.append(flagged)
            events.append(ev.job_event(ev.CANCEL_REQUESTED, flagged, {"reason": reason}))
            continue
        cancelled, event = tr.cancel(job, reason, now)
        # Written before the cascade reads dependents, and one at a time, so a job named later in ``ids``
        # that the cascade already cancelled is seen as terminal (and keeps the cascade's reason).
        save_jobs(conn, [(job, cancelled)])
        loaded[job_id] = cancelled
        jobs.append(cancelled)
        events.append(event)
        cascaded, cascade_events = cancel_dependents(conn, cancelled, now)
        loaded.update((j.id, j) for j in cascaded if j.id in loaded)
        jobs.extend(cascaded)
        events.extend(cascade_events)
    return Changed(jobs, append_events(conn, events, now))


def retry_jobs(conn: sqlite3.Connection, ids: Sequence[JobId], now: float, tenant: str | None) -> Changed:
    loaded = {i: j for i, j in jobs_by_id(conn, ids).items() if tenant is None or j.tenant == tenant}
    changes: list[tuple[Job, Job]] = []
    events: list[NewEvent] = []
    for job_id in ids:
        job = loaded.get(job_id)
        if job is None or job.state not in (JobState.DEAD, JobState.CANCELLED, JobState.FAILED):
            continue
        retried, event = tr.retry_now(job, now)
        loaded[job_id] = retried
        changes.append((job, retried))
        events.append(event)
    return _changed(conn, changes, events, now)


def prune_jobs(conn: sqlite3.Connection, stale_before: float, delete_before: float, now: float, limit: int) -> Pruned:
    """Delete stale jobs first, then make terminal ones stale, ``limit`` in all.

    A job is never made stale and deleted in the same call, so its ``job.stale`` event always comes
    before its ``job.deleted`` one. Both scans follow the ``jobs_retention`` index (state, finished_at),
    so a large backlog is worked off oldest first without sorting it; the events of one call are then
    appended in job id order, as the parity oracle appends them.
    """
    if limit <= 0:
        return Pruned(0, 0, [])
    events: list[tuple[JobId, NewEvent]] = []
    doomed = select_jobs(
        conn,
        "jobs.state = 'stale' AND jobs.finished_at < ? ORDER BY jobs.finished_at LIMIT ?",
        (delete_before, limit),
    )
    if doomed:
        ids = json_list(j.id for j in doomed)
        conn.execute("DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?))", (ids,))
        # Edges from the deleted job go; edges *to* it stay, so its dependents keep their depends_on.
        conn.execute("DELETE FROM job_deps WHERE job_id IN (SELECT value FROM json_each(?))", (ids,))
        events.extend((j.id, ev.job_event(ev.DELETED, j)) for j in doomed)
    changes: list[tuple[Job, Job]] = []
    if limit - len(doomed) > 0:
        finished = select_jobs(
            conn,
            # No ORDER BY: jobs_retention already yields each state oldest first, and sorting across the
            # three states would read every candidate before the LIMIT could apply.
            "jobs.state IN ('succeeded', 'dead', 'cancelled') AND jobs.finished_at < ? LIMIT ?",
            (stale_before, limit - len(doomed)),
        )
        for job in finished:
            stale, event = tr.make_stale(job, now)
            changes.append((job, stale))
            events.append((job.id, event))
        save_jobs(conn, changes)
    events.sort(key=lambda pair: pair[0])
    return Pruned(len(changes), len(doomed), append_events(conn, [e for _, e in events], now))
