"""Mapping between SQLite rows and domain values, and the few statements every transaction shares."""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Iterable, Sequence
from types import MappingProxyType
from typing import Any, Final

from jobengine.core import codec
from jobengine.core.ids import JobId
from jobengine.core.models import AttemptError, Event, Job, Json, NewEvent, Phase
from jobengine.core.states import JobState
from jobengine.errors import StoreError

_COLUMNS: Final = (
    "id tenant queue task payload priority run_at state attempt max_attempts created_at updated_at idempotency_key "
    "timeout lease_worker lease_token lease_expires_at cancel_requested reason phases progress result errors outcome "
    "started_at finished_at run_id schedule_id"
)

#: The select list that :func:`job_from_row` reads. depends_on comes from job_deps in declared order
#: (the inner ORDER BY is kept by SQLite because an aggregate's subquery is never flattened).
JOB_COLUMNS: Final = ", ".join(f"jobs.{c}" for c in _COLUMNS.split()) + (
    ", (SELECT group_concat(depends_on, ' ') FROM "
    "(SELECT depends_on FROM job_deps WHERE job_deps.job_id = jobs.id ORDER BY position)), "
    # has_dependents: one probe of job_deps_depends_on per row.
    "EXISTS (SELECT 1 FROM job_deps WHERE job_deps.depends_on = jobs.id), "
    # Last, so the positions fenced.py reads stay where they are.
    "jobs.graph_id, jobs.trace"
)

#: The states a worker may claim, spelled exactly as in the partial index ``jobs_claim``: SQLite uses a
#: partial index only when the query repeats its WHERE term.
RUNNABLE_SQL: Final = "(state = 'queued' OR state = 'scheduled' OR state = 'failed')"

# Only what a transition can change is written back; id, tenant, queue, task, payload, priority and
# max_attempts never change after insert. The WHERE clause is a compare-and-set on the row as it was read,
# so a write-back can never land on a row that changed underneath (it cannot under the write lock; this
# makes the fence visible in the statement itself).
_UPDATE_JOB: Final = (
    "UPDATE jobs SET state = ?, attempt = ?, run_at = ?, lease_worker = ?, lease_token = ?, "
    "lease_expires_at = ?, cancel_requested = ?, reason = ?, phases = ?, progress = ?, result = ?, "
    "errors = ?, outcome = ?, started_at = ?, finished_at = ?, updated_at = ? "
    "WHERE id = ? AND state = ? AND lease_token IS ?"
)

_INSERT_EVENT: Final = "INSERT INTO events (at, type, tenant, job_id, queue, task, data) VALUES "
_EVENT_ROW: Final = "(?1, ?, ?, ?, ?, ?, ?)"  # every event of a transaction is at the same time: bound once

#: Rows per multi-row INSERT. One statement per row (executemany) pays the statement start-up and, for the
#: AUTOINCREMENT events table, a sqlite_sequence update per row (docs/decisions/0011-sqlite-multi-row-insert.md).
#: 100 rows of the widest insert bind 1,600 parameters, far below SQLite's limit (32,766).
_CHUNK: Final = 100


def insert_rows(
    conn: sqlite3.Connection,
    prefix: str,
    width: int,
    rows: Sequence[Sequence[Any]],
    *,
    row: str | None = None,
    shared: Sequence[Any] = (),
) -> int | None:
    """``prefix`` is ``INSERT INTO t (cols) VALUES ``; rows are written in order, in chunks. Returns the
    rowid of the last row written (None if there were no rows).

    ``row``: the placeholders of one row (default: ``width`` times ``?``); ``shared``: values bound once per
    statement, ahead of the rows' values, which ``row`` names ``?1``, ``?2``... before its first plain
    ``?`` (binding a value costs more than SQLite's work for it:
    docs/decisions/0011-sqlite-multi-row-insert.md)."""
    one = row or "(" + ", ".join("?" * width) + ")"
    last: int | None = None
    for start in range(0, len(rows), _CHUNK):
        chunk = rows[start : start + _CHUNK]
        # Only the last chunk differs in length, so the statement cache holds few distinct statements.
        params = list(itertools.chain(shared, itertools.chain.from_iterable(chunk)))
        last = conn.execute(prefix + ", ".join([one] * len(chunk)), params).lastrowid
    return last


# Parameters that SQL reads with json_each / ->> are never stored, so they need not be canonical (codec):
# the json module's C encoder writes strings exactly as the codec does (same escaper, no ASCII escaping)
# and numbers that parse back to the same values, faster than the codec's Python encoder
# (docs/decisions/0017-sqlite-write-lock-for-sql-only.md).
_PARAMS: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def param_json(value: Any) -> str:
    """A JSON parameter for SQL's json_each / ``->>`` (lists of ids, tokens, texts, finite numbers)."""
    return _PARAMS.encode(value)


def json_list(values: Iterable[str]) -> str:
    """One parameter for ``IN (SELECT value FROM json_each(?))``: no bound-variable limit, one statement."""
    return _PARAMS.encode(list(values))


#: JobState by value: a dict lookup is cheaper than calling the enum, once per row read.
_STATES: Final = MappingProxyType({s.value: s for s in JobState})


def _phases(text: str) -> tuple[Phase, ...]:
    if text == "[]":
        return ()
    return tuple(Phase.from_json(d) for d in codec.loads(text))


def _errors(text: str) -> tuple[AttemptError, ...]:
    if text == "[]":
        return ()
    return tuple(AttemptError.from_json(d) for d in codec.loads(text))


def job_from_row(r: Sequence[Any]) -> Job:
    """Build a Job from a row selected with :data:`JOB_COLUMNS`."""
    return Job(
        id=r[0], tenant=r[1], queue=r[2], task=r[3], payload=codec.loads(r[4]), priority=r[5], run_at=r[6],
        state=_STATES[r[7]], attempt=r[8], max_attempts=r[9], created_at=r[10], updated_at=r[11],
        idempotency_key=r[12], timeout=r[13], lease_worker=r[14], lease_token=r[15], lease_expires_at=r[16],
        cancel_requested=bool(r[17]), reason=r[18], phases=_phases(r[19]), progress=r[20],
        result=codec.loads(r[21]), errors=_errors(r[22]), outcome=None if r[23] is None else _STATES[r[23]],
        started_at=r[24], finished_at=r[25], run_id=r[26], schedule_id=r[27],
        depends_on=tuple(r[28].split(" ")) if r[28] else (), has_dependents=bool(r[29]), graph_id=r[30],
        trace=r[31],
    )  # fmt: skip


def phases_json(phases: Sequence[Phase]) -> str:
    return "[]" if not phases else codec.dumps([p.to_json() for p in phases], "phases")


def errors_json(errors: Sequence[AttemptError]) -> str:
    return "[]" if not errors else codec.dumps([e.to_json() for e in errors], "errors")


def result_json(result: Json) -> str | None:
    return None if result is None else codec.dumps(result, "result")


def select_jobs(conn: sqlite3.Connection, where: str, params: Sequence[Any] = ()) -> list[Job]:
    """``SELECT`` jobs with a WHERE (and maybe ORDER BY / LIMIT) clause written by the caller."""
    return [job_from_row(r) for r in conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE {where}", params)]


def jobs_by_id(conn: sqlite3.Connection, ids: Iterable[str]) -> dict[JobId, Job]:
    jobs = select_jobs(conn, "jobs.id IN (SELECT value FROM json_each(?))", (json_list(ids),))
    return {j.id: j for j in jobs}


def save_jobs(conn: sqlite3.Connection, changes: Sequence[tuple[Job, Job]]) -> None:
    """Write back ``(as read, as now)`` pairs. Raises StoreError if a row was not as read."""
    if not changes:
        return
    cur = conn.executemany(_UPDATE_JOB, [_written(old, new) for old, new in changes])
    if cur.rowcount != len(changes):
        raise StoreError(f"sqlite: {len(changes) - cur.rowcount} job(s) changed while being written back")


def _written(old: Job, new: Job) -> tuple[Any, ...]:
    """The parameters of ``_UPDATE_JOB``."""
    return (
        new.state.value, new.attempt, new.run_at, new.lease_worker, new.lease_token, new.lease_expires_at,
        int(new.cancel_requested), new.reason, phases_json(new.phases), new.progress, result_json(new.result),
        errors_json(new.errors), None if new.outcome is None else new.outcome.value, new.started_at,
        new.finished_at, new.updated_at, old.id, old.state.value, old.lease_token,
    )  # fmt: skip


def append_events(conn: sqlite3.Connection, events: Sequence[NewEvent], now: float) -> list[Event]:
    """Append events in order and return them numbered (see :func:`insert_events`)."""
    if not events:
        return []
    first = insert_events(conn, now, [(e.type, e.tenant, e.job_id, e.queue, e.task, _event_data(e)) for e in events])
    return [Event(first + i, now, e.type, e.tenant, e.job_id, e.queue, e.task, e.data) for i, e in enumerate(events)]


def insert_events(conn: sqlite3.Connection, now: float, rows: Sequence[tuple[Any, ...]]) -> int:
    """Append event rows ``(type, tenant, job_id, queue, task, data text)`` at ``now``, in order; returns the
    id of the first.

    The ids are consecutive because this connection holds the write lock and the table is AUTOINCREMENT,
    so the last rowid tells them all without a RETURNING round trip per row.
    """
    last = insert_rows(conn, _INSERT_EVENT, 6, rows, row=_EVENT_ROW, shared=(now,))
    assert last is not None, "no event rows"
    return last - len(rows) + 1


def _event_data(event: NewEvent) -> str:
    data = event.data
    return codec.dumps(data if isinstance(data, dict) else dict(data), "event")
