"""The hot path: claim, heartbeat, complete, fail and release, each as one set-based UPDATE ... RETURNING.

These run for every job a worker touches, so they do not read rows, apply ``core/transitions.py`` in
Python and write rows back (the pattern of ``writes.py``): each is a single UPDATE that states the same
transition in SQL, driven by a ``json_each`` list of the batch, fenced in its WHERE clause by
``id``, ``lease_token`` and ``state = 'running'``. What a row becomes must stay exactly what the pure
function of the same name makes of it; the contract suite compares every field with the parity oracle,
which applies those functions directly. A job named twice in one batch counts once (its first entry).

Each transition is split in two, so that the write lock (shared by every process on the file) is held
only for SQL: the part that runs inside the transaction (``claim``, ``succeed``, ``fail``, ``release``)
executes the statements and keeps the returned rows as plain tuples; the part that runs after COMMIT
(``claimed``, ``succeeded``, ``failed``, ``released``) builds the Job and Event values from them. The
event rows are written in the transaction with their data already encoded: for the per-job events
(started, succeeded, released) from a fixed template with the variable parts encoded as the codec does,
which :mod:`tests.integration.test_sqlite_fast_paths` holds byte-equal to ``codec.dumps`` of the body
``core.events.job_event`` makes.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Final

from jobengine.backends.sql.base import unique as first_per_job
from jobengine.core import codec
from jobengine.core import events as ev
from jobengine.core.ids import JobId, WorkerId
from jobengine.core.models import (
    Changed,
    Completion,
    Event,
    FailOutcome,
    Failure,
    Heartbeat,
    Job,
    Json,
    Lease,
    NewEvent,
    Phase,
    PhaseState,
)
from jobengine.core.states import BREAKS_DEPENDENTS

from .deps import cancel_dependents, unblock_dependents
from .rows import JOB_COLUMNS, RUNNABLE_SQL, insert_events, job_from_row, json_list, param_json, phases_json

Row = tuple[Any, ...]

#: SQL functions registered on the store's connection (see :func:`register_functions`).
LEASE_TOKEN_FN: Final = "jobengine_lease_token"
RESTART_PHASES_FN: Final = "jobengine_restart_phases"

_CLEAR_LEASE: Final = "lease_worker = NULL, lease_token = NULL, lease_expires_at = NULL"
# UPDATE ... FROM updates a row once even if several batch entries match it, but with an arbitrary one: a
# batch keeps the first entry of each job (first_per_job).
_FENCE: Final = "jobs.id = b.id AND jobs.lease_token = b.token AND jobs.state = 'running'"
# Positions in a row of JOB_COLUMNS (see rows.job_from_row). _DEPENDENTS: whether any job depends on the
# row's job (one probe of job_deps_depends_on per row), so a batch whose jobs have no dependents (the usual
# case) skips the dependents' queries altogether.
_ID, _TENANT, _QUEUE, _TASK, _PRIORITY, _RUN_AT, _STATE, _ATTEMPT = 0, 1, 2, 3, 5, 6, 7, 8
_REASON, _STARTED_AT = 18, 24
DEPENDENTS: Final = 29
_DEPENDENTS: Final = DEPENDENTS
#: Where a row holds its job's graph (``db.settle_graphs`` reads it).
GRAPH: Final = 30

_START: Final = f"""
UPDATE jobs SET state = 'running', attempt = attempt + 1, lease_worker = ?, lease_token = {LEASE_TOKEN_FN}(),
    lease_expires_at = ?, started_at = ?, updated_at = ?,
    phases = CASE WHEN instr(phases, '"state":"running"') THEN {RESTART_PHASES_FN}(phases) ELSE phases END
WHERE id IN (SELECT id FROM ({{union}}) ORDER BY priority DESC, run_at, id LIMIT ?)
RETURNING {JOB_COLUMNS}
"""
_CLAIM_BRANCH: Final = (
    f"SELECT id, priority, run_at FROM (SELECT id, priority, run_at FROM jobs WHERE {RUNNABLE_SQL} "
    "AND queue = ? AND run_at <= ?{claimable} ORDER BY priority DESC, run_at, id LIMIT ?)"
)
_CLAIM_IDS: Final = _START.format(
    union=f"SELECT id, priority, run_at FROM jobs WHERE id IN (SELECT value FROM json_each(?)) AND {RUNNABLE_SQL} "
    "AND run_at <= ? AND (? IS NULL OR task IN (SELECT value FROM json_each(?)))"
)
# The lock-free look before a claim: the first entry of jobs_claim per queue that is due.
_DUE_BRANCH: Final = f"EXISTS (SELECT 1 FROM jobs WHERE {RUNNABLE_SQL} AND queue = ? AND run_at <= ?{{claimable}})"


class Claimable:
    """The terms that restrict a claim to a worker's tasks (None: any) and tenant (None: any), as SQL to
    append to a WHERE clause and the values it binds. A worker claims only what it can run: rows of other
    tasks are passed over by the index walk."""

    __slots__ = ("args", "nothing", "sql")

    def __init__(self, tasks: Sequence[str] | None, tenant: str | None) -> None:
        #: An empty task list: nothing can be claimed.
        self.nothing = tasks is not None and not tasks
        self.sql = ""
        self.args: list[str] = []
        if tasks is not None:
            names = list(dict.fromkeys(tasks))
            self.sql += f" AND task IN ({', '.join('?' * len(names))})"
            self.args += names
        if tenant is not None:
            self.sql += " AND tenant = ?"
            self.args.append(tenant)


ANY = Claimable(None, None)

_HEARTBEAT: Final = f"""
UPDATE jobs SET lease_expires_at = ?, updated_at = ?
FROM (SELECT value ->> 0 AS id, value ->> 1 AS token FROM json_each(?)) AS b
WHERE {_FENCE}
RETURNING jobs.id, jobs.cancel_requested
"""

_SUCCEED: Final = f"""
UPDATE jobs SET state = 'succeeded', result = b.result, progress = 1.0, finished_at = ?, updated_at = ?,
    cancel_requested = 0, {_CLEAR_LEASE}
FROM (SELECT value ->> 0 AS id, value ->> 1 AS token, value ->> 2 AS result FROM json_each(?)) AS b
WHERE {_FENCE}
RETURNING {JOB_COLUMNS}
"""

# errors is always a codec-written JSON array, so appending one element is text surgery, not a re-encode.
_FAIL: Final = f"""
UPDATE jobs SET
    state = b.state,
    run_at = CASE WHEN b.state = 'failed' THEN b.retry_at ELSE run_at END,
    finished_at = CASE WHEN b.state = 'failed' THEN finished_at ELSE ? END,
    reason = CASE b.state WHEN 'dead' THEN b.message WHEN 'cancelled' THEN coalesce(nullif(reason, ''), 'cancelled')
                  ELSE reason END,
    errors = CASE WHEN errors = '[]' THEN '[' || b.error || ']'
                  ELSE substr(errors, 1, length(errors) - 1) || ',' || b.error || ']' END,
    updated_at = ?, cancel_requested = 0, {_CLEAR_LEASE}
FROM (SELECT value ->> 0 AS id, value ->> 1 AS token, value ->> 2 AS state, value ->> 3 AS retry_at,
             value ->> 4 AS expired_at, value ->> 5 AS error, value ->> 6 AS message FROM json_each(?)) AS b
WHERE {_FENCE} AND (b.expired_at IS NULL OR jobs.lease_expires_at < b.expired_at)
RETURNING {JOB_COLUMNS}
"""

_RELEASE: Final = f"""
UPDATE jobs SET state = 'queued', attempt = max(0, attempt - 1), updated_at = ?, {_CLEAR_LEASE}
FROM (SELECT value ->> 0 AS id, value ->> 1 AS token FROM json_each(?)) AS b
WHERE {_FENCE}
RETURNING {JOB_COLUMNS}
"""

_TARGET_STATE: Final = MappingProxyType(
    {FailOutcome.RETRY: "failed", FailOutcome.DEAD: "dead", FailOutcome.CANCELLED: "cancelled"}
)

# The data of the per-job events as codec.dumps writes the body of core.events.job_event: keys sorted,
# no spaces; attempt is an INTEGER column (a Python int, written as int.__repr__ as the codec does), the
# other variable parts are encoded by the codec itself (see _json_number and codec.dumps).
_STARTED_DATA: Final = '{"attempt":%d,"state":"running","worker":%s}'
_SUCCEEDED_DATA: Final = '{"attempt":%d,"duration":%s,"state":"succeeded"}'
_RELEASED_DATA: Final = '{"attempt":%d,"state":"queued"}'


def _json_number(value: float) -> str:
    """``codec.dumps(value)`` of a number, without its dispatch for the common float."""
    return codec.number(value) if type(value) is float else codec.dumps(value, "event")


def register_functions(conn: sqlite3.Connection, new_token: Callable[[], str]) -> None:
    conn.create_function(LEASE_TOKEN_FN, 0, new_token)
    conn.create_function(RESTART_PHASES_FN, 1, restart_phases, deterministic=True)


class LeaseTokens:
    """Lease tokens as ``core.ids.new_lease_token`` makes them (12 bytes from ``os.urandom``, in hex), read
    from the OS 256 at a time: the claim calls this once per job it starts, inside the write transaction,
    where a system call each is a noticeable share of what a claimed job costs
    (docs/decisions/0017-sqlite-write-lock-for-sql-only.md). A forked child starts a buffer of its own, so it
    never repeats its parent's tokens."""

    __slots__ = ("_buffer", "_forks", "_position")

    _BYTES: Final = 12
    _BATCH: Final = 256

    def __init__(self) -> None:
        self._buffer = ""
        self._position = 0
        self._forks = _forks

    def __call__(self) -> str:
        start = self._position
        if start >= len(self._buffer) or self._forks != _forks:
            self._buffer = os.urandom(self._BYTES * self._BATCH).hex()
            self._forks = _forks
            start = 0
        self._position = end = start + 2 * self._BYTES
        return self._buffer[start:end]


_forks = 0  # forks this process has been through as the child


def _forked() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_forked)


def restart_phases(text: str) -> str:
    """The phases of a job being started, as ``core.transitions.start`` leaves them: when one was left
    running (its process died), every phase that has not succeeded is pending again, checkpoint kept."""
    phases = [Phase.from_json(d) for d in codec.loads(text)]
    if not any(p.state is PhaseState.RUNNING for p in phases):
        return text
    return phases_json([p if p.state is PhaseState.SUCCEEDED else replace(p, state=PhaseState.PENDING) for p in phases])


def _in_order(rows: Iterable[Row], order: Iterable[str]) -> list[Row]:
    """RETURNING yields rows in no promised order; give them back in the caller's order."""
    by_id = {r[0]: r for r in rows}
    return [by_id[i] for i in order if i in by_id]


@dataclass(slots=True)
class Applied:
    """What a transition wrote, as the transaction left it: the rows it changed (in result order), the id
    of its first event, and the jobs and events of dependents it changed on the way (already built: rare)."""

    rows: list[Row] = field(default_factory=list)
    first_event: int = 0
    #: Per row (by job id): the dependents' jobs and events that follow that row's own job and event.
    cascades: dict[JobId, tuple[list[Job], list[NewEvent]]] = field(default_factory=dict)
    #: Graph nodes queued again after the rest (``db.settle_graphs``), already built and numbered.
    settled: Changed | None = None


def _events_after(applied: Applied, own: list[Event], jobs: list[Job]) -> Changed:
    """Merge each row's own job and event with its cascade, numbering the cascade's events in between."""
    if not applied.cascades:
        return _with_settled(applied, Changed(jobs, own))
    out_jobs: list[Job] = []
    out_events: list[Event] = []
    next_id = applied.first_event
    for job, event in zip(jobs, own, strict=True):
        out_jobs.append(job)
        out_events.append(replace(event, id=next_id))
        next_id += 1
        more = applied.cascades.get(job.id)
        if more is not None:
            out_jobs.extend(more[0])
            for e in more[1]:
                out_events.append(Event(next_id, event.at, e.type, e.tenant, e.job_id, e.queue, e.task, e.data))
                next_id += 1
    return _with_settled(applied, Changed(out_jobs, out_events))


def _with_settled(applied: Applied, changed: Changed) -> Changed:
    if applied.settled is None:
        return changed
    return changed.then(applied.settled)


def _cascade_rows(applied: Applied, own: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The event rows to insert: each row's own event followed by those of its cascade."""
    if not applied.cascades:
        return own
    rows: list[tuple[Any, ...]] = []
    for row, event_row in zip(applied.rows, own, strict=True):
        rows.append(event_row)
        more = applied.cascades.get(row[_ID])
        if more is not None:
            rows.extend((e.type, e.tenant, e.job_id, e.queue, e.task, _event_text(e.data)) for e in more[1])
    return rows


def _event_text(data: Any) -> str:
    return codec.dumps(data if isinstance(data, dict) else dict(data), "event")


# -- claim ------------------------------------------------------------------------------------------------


def any_due(conn: sqlite3.Connection, queues: Sequence[str], now: float, which: Claimable = ANY) -> bool:
    """Whether some job of ``queues`` (that ``which`` admits) is runnable now. Runs outside any transaction:
    a WAL reader takes no lock, so a worker woken for nothing (another worker was faster, or the commit was
    not a job it can run) finds out without queueing for the write lock. One probe of ``jobs_claim`` per
    queue."""
    sql = "SELECT " + " OR ".join([_DUE_BRANCH.format(claimable=which.sql)] * len(queues))
    row = conn.execute(sql, [a for q in queues for a in (q, now, *which.args)]).fetchone()
    return bool(row[0])


def claim(
    conn: sqlite3.Connection,
    queues: Sequence[str],
    limit: int,
    worker: WorkerId,
    lease_seconds: float,
    now: float,
    which: Claimable = ANY,
) -> Applied:
    """In the transaction: start up to ``limit`` jobs that ``which`` admits; ``queues`` without repeats."""
    # One ordered, limited range of jobs_claim per queue, then the best ``limit`` of those: with
    # ``queue IN (...)`` SQLite would read every runnable job of the queues into a sorter first.
    branch = _CLAIM_BRANCH.format(claimable=which.sql)
    sql = _START.format(union=" UNION ALL ".join([branch] * len(queues)))
    params = [worker, now + lease_seconds, now, now, *(a for q in queues for a in (q, now, *which.args, limit)), limit]
    return _started(conn, conn.execute(sql, params).fetchall(), worker, now)


def claim_ids(
    conn: sqlite3.Connection,
    ids: Sequence[JobId],
    worker: WorkerId,
    lease: float,
    now: float,
    tasks: Sequence[str] | None,
) -> Applied:
    """In the transaction: :func:`claim` over the given ids (of ``tasks``: None, any) instead of the queues'
    heads: the outbox's delivered messages, the limited claim's choice."""
    unique = list(dict.fromkeys(ids))
    names = json_list(tasks) if tasks is not None else None
    params = [worker, now + lease, now, now, json_list(unique), now, names, names, len(unique)]
    return _started(conn, conn.execute(_CLAIM_IDS, params).fetchall(), worker, now)


def _started(conn: sqlite3.Connection, rows: list[Row], worker: WorkerId, now: float) -> Applied:
    """The rows a claim started, in claim order, with their ``job.started`` events written."""
    if not rows:
        return Applied()
    rows.sort(key=lambda r: (-r[_PRIORITY], r[_RUN_AT], r[_ID]))
    who = codec.dumps(worker, "worker")
    first = insert_events(
        conn,
        now,
        [(ev.STARTED, r[_TENANT], r[_ID], r[_QUEUE], r[_TASK], _STARTED_DATA % (r[_ATTEMPT], who)) for r in rows],
    )
    return Applied(rows, first)


def claimed(applied: Applied, worker: WorkerId, now: float) -> Changed:
    """After COMMIT: the jobs :func:`claim` started and their ``job.started`` events."""
    jobs = [job_from_row(r) for r in applied.rows]
    first = applied.first_event
    return Changed(
        jobs,
        [
            # The body of core.events.job_event(STARTED, job, {"worker": worker}).
            Event(first + i, now, ev.STARTED, j.tenant, j.id, j.queue, j.task,
                  {"state": j.state.value, "attempt": j.attempt, "worker": worker})
            for i, j in enumerate(jobs)
        ],
    )  # fmt: skip


def fetch_jobs(
    conn: sqlite3.Connection,
    queues: Sequence[str],
    limit: int,
    worker: WorkerId,
    lease_seconds: float,
    now: float,
    which: Claimable = ANY,
) -> Changed:
    """:func:`claim` and :func:`claimed` in one go, for a caller that holds the transaction."""
    if limit <= 0 or not queues or which.nothing:
        return Changed()
    return claimed(claim(conn, list(dict.fromkeys(queues)), limit, worker, lease_seconds, now, which), worker, now)


# -- heartbeat --------------------------------------------------------------------------------------------


def heartbeat_jobs(conn: sqlite3.Connection, leases: Sequence[Lease], lease_until: float, now: float) -> Heartbeat:
    batch = param_json([[lease.job_id, lease.token] for lease in leases])
    rows = conn.execute(_HEARTBEAT, (lease_until, now, batch)).fetchall()
    return Heartbeat(frozenset(r[0] for r in rows), frozenset(r[0] for r in rows if r[1]))


# -- complete ---------------------------------------------------------------------------------------------


def succeed(conn: sqlite3.Connection, completions: Sequence[Completion], now: float) -> Applied:
    """In the transaction: the jobs held by these leases succeed; dependents that were waiting only for
    them become runnable."""
    unique = first_per_job(completions, lambda c: c.job_id)
    batch = param_json(
        [[c.job_id, c.token, None if c.result is None else codec.dumps(c.result, "result")] for c in unique]
    )
    rows = _in_order(conn.execute(_SUCCEED, (now, now, batch)), (c.job_id for c in unique))
    if not rows:
        return Applied()
    applied = Applied(rows)
    parents = [r[_ID] for r in rows if r[_DEPENDENTS]]
    if parents:
        applied.cascades = unblock_dependents(conn, parents, now)
    own = [
        (ev.SUCCEEDED, r[_TENANT], r[_ID], r[_QUEUE], r[_TASK],
         _SUCCEEDED_DATA % (r[_ATTEMPT], _json_number(now - (r[_STARTED_AT] or now))))
        for r in rows
    ]  # fmt: skip
    applied.first_event = insert_events(conn, now, _cascade_rows(applied, own))
    return applied


def succeeded(applied: Applied, now: float) -> Changed:
    """After COMMIT: the jobs :func:`succeed` changed, each followed by the dependents it released."""
    jobs = [job_from_row(r) for r in applied.rows]
    first = applied.first_event
    own = [
        # The body of core.transitions.succeed's event.
        Event(first + i, now, ev.SUCCEEDED, j.tenant, j.id, j.queue, j.task,
              {"state": j.state.value, "attempt": j.attempt, "duration": now - (j.started_at or now)})
        for i, j in enumerate(jobs)
    ]  # fmt: skip
    return _events_after(applied, own, jobs)


def complete_jobs(conn: sqlite3.Connection, completions: Sequence[Completion], now: float) -> Changed:
    """:func:`succeed` and :func:`succeeded` in one go, for a caller that holds the transaction."""
    return succeeded(succeed(conn, completions, now), now)


# -- fail -------------------------------------------------------------------------------------------------


def _fail_data(failure: Failure, state: str, attempt: int, reason: str | None) -> dict[str, Json]:
    """The body of core.transitions.fail's event for a job that became ``state``."""
    error = failure.error
    if failure.outcome is FailOutcome.RETRY:
        data: dict[str, Json] = {"error": error.message, "error_type": error.type, "retry_at": failure.retry_at}
    elif failure.outcome is FailOutcome.DEAD:
        data = {"error": error.message, "error_type": error.type}
    else:
        data = {"reason": reason}
    return {"state": state, "attempt": attempt, **data}


def _fail_type(failure: Failure) -> str:
    return {FailOutcome.RETRY: ev.FAILED, FailOutcome.DEAD: ev.DEAD}.get(failure.outcome, ev.CANCELLED)


def fail(conn: sqlite3.Connection, failures: Sequence[Failure], now: float) -> Applied:
    """In the transaction: the failed attempts of the jobs held by these leases; a job that ends dead or
    cancelled cancels its blocked dependents, transitively."""
    if any(f.outcome is FailOutcome.RETRY and f.retry_at is None for f in failures):
        raise ValueError("a failure with outcome retry needs retry_at")
    unique = first_per_job(failures, lambda f: f.job_id)
    batch = param_json(
        [
            [
                f.job_id,
                f.token,
                _TARGET_STATE[f.outcome],
                f.retry_at,
                f.only_if_expired_at,
                codec.dumps(f.error.to_json(), "error"),
                f.error.message,
            ]
            for f in unique
        ]
    )
    rows = _in_order(conn.execute(_FAIL, (now, now, batch)), (f.job_id for f in unique))
    if not rows:
        return Applied()
    applied = Applied(rows)
    by_id = {f.job_id: f for f in unique}
    for r in rows:
        if r[_DEPENDENTS] and r[_STATE] in _BREAKS:
            # cancel_dependents reads only the root's id and state; the cascade is rare, so the root is built.
            applied.cascades[r[_ID]] = cancel_dependents(conn, job_from_row(r), now)
    own = [
        (_fail_type(by_id[r[_ID]]), r[_TENANT], r[_ID], r[_QUEUE], r[_TASK],
         _event_text(_fail_data(by_id[r[_ID]], r[_STATE], r[_ATTEMPT], r[_REASON])))
        for r in rows
    ]  # fmt: skip
    applied.first_event = insert_events(conn, now, _cascade_rows(applied, own))
    return applied


_BREAKS: Final = frozenset(s.value for s in BREAKS_DEPENDENTS)


def failed(applied: Applied, failures: Sequence[Failure], now: float) -> Changed:
    """After COMMIT: the jobs :func:`fail` changed, each followed by the dependents it cancelled."""
    by_id: dict[JobId, Failure] = {}
    for f in failures:
        by_id.setdefault(f.job_id, f)
    jobs = [job_from_row(r) for r in applied.rows]
    first = applied.first_event
    own = [
        Event(first + i, now, _fail_type(by_id[j.id]), j.tenant, j.id, j.queue, j.task,
              _fail_data(by_id[j.id], j.state.value, j.attempt, j.reason))
        for i, j in enumerate(jobs)
    ]  # fmt: skip
    return _events_after(applied, own, jobs)


def fail_jobs(conn: sqlite3.Connection, failures: Sequence[Failure], now: float) -> Changed:
    """:func:`fail` and :func:`failed` in one go, for a caller that holds the transaction."""
    return failed(fail(conn, failures, now), failures, now)


# -- release ----------------------------------------------------------------------------------------------


def release(conn: sqlite3.Connection, leases: Sequence[Lease], now: float) -> Applied:
    """In the transaction: the jobs held by these leases go back to queued, their attempt given back."""
    unique = first_per_job(leases, lambda lease: lease.job_id)
    batch = param_json([[lease.job_id, lease.token] for lease in unique])
    rows = _in_order(conn.execute(_RELEASE, (now, batch)), (lease.job_id for lease in unique))
    if not rows:
        return Applied()
    first = insert_events(
        conn,
        now,
        [(ev.RELEASED, r[_TENANT], r[_ID], r[_QUEUE], r[_TASK], _RELEASED_DATA % (r[_ATTEMPT],)) for r in rows],
    )
    return Applied(rows, first)


def released(applied: Applied, now: float) -> Changed:
    """After COMMIT: the jobs :func:`release` changed and their ``job.released`` events."""
    jobs = [job_from_row(r) for r in applied.rows]
    first = applied.first_event
    return Changed(
        jobs,
        [
            # The body of core.transitions.release's event.
            Event(first + i, now, ev.RELEASED, j.tenant, j.id, j.queue, j.task,
                  {"state": j.state.value, "attempt": j.attempt})
            for i, j in enumerate(jobs)
        ],
    )  # fmt: skip


def release_jobs(conn: sqlite3.Connection, leases: Sequence[Lease], now: float) -> Changed:
    """:func:`release` and :func:`released` in one go, for a caller that holds the transaction."""
    return released(release(conn, leases, now), now)
