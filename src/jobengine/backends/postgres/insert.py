"""insert_jobs on one connection: the store's pooled one, or a caller's inside its own transaction.

Three paths:
- fast, one statement: no job of the batch has dependencies and no idempotency key repeats within it. The
  statement writes nothing if a key is already taken (or the unique index finds one taken concurrently);
  then the general path runs.
- piped, for a large batch without keys, dependencies or watermarks: the fast statement once per chunk of
  ``PIPE_CHUNK`` jobs, sent in one pipeline inside one transaction, so that the client encodes a chunk while
  the server writes the one before (see :func:`insert_piped`).
- general, in a transaction (a savepoint inside a caller's transaction): look up the keys, lock and flag the
  parents, decide every state in Python exactly as the parity oracle does, then write it all in one statement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import tuple_row

from jobengine.backends.postgres.rows import encode_rows, event_from_row, job_from_row
from jobengine.backends.postgres.sql import Queries
from jobengine.core import codec
from jobengine.core import events as ev
from jobengine.core import transitions as tr
from jobengine.core.ids import JobId
from jobengine.core.models import Event, Inserted, Job, Json, NewEvent, NewJob, Phase
from jobengine.core.states import BREAKS_DEPENDENTS, JobState
from jobengine.errors import IdempotencyConflict, InvalidJob, StoreError, UnknownDependency
from jobengine.ports.watermarks import Watermark

Conn = psycopg.AsyncConnection[Any]
# In C, unlike any() over a generator (docs/decisions/0021-enqueue-client-instructions.md).
_DEPENDS_ON = attrgetter("depends_on")
_KEY = attrgetter("idempotency_key")
#: Rows per statement of a piped batch, and the smallest batch that is piped (two chunks).
PIPE_CHUNK = 250


@dataclass(slots=True)
class InsertPlan:
    """A batch, validated and encoded once before any SQL runs."""

    jobs: Sequence[NewJob]
    now: float
    phases: list[tuple[Phase, ...]]
    #: The payloads as the codec reads them back (tuples become lists...): what the store keeps and returns.
    payloads: list[Json]
    watermarks: Mapping[JobId, Sequence[Watermark]]
    fast: bool
    has_keys: bool

    @classmethod
    def of(
        cls,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        watermarks: Mapping[JobId, Sequence[Watermark]] | None,
    ) -> InsertPlan:
        keys = [(j.tenant, j.idempotency_key) for j in jobs if j.idempotency_key is not None]
        # The codec validates every payload (InvalidJob on "payload"); the decoded copy is what the memory
        # store would keep.
        payloads = [codec.normalize(j.payload) for j in jobs]
        # One template per distinct list of phase names (a batch has few tasks), shared by the jobs that
        # have it: Phase is an immutable value.
        templates = {names: tr.phases_template(names) for names in set(phases)}
        return cls(
            jobs=jobs,
            now=now,
            phases=[templates[p] for p in phases[: len(jobs)]] + [()] * (len(jobs) - len(phases)),
            payloads=payloads,
            watermarks=watermarks or {},
            fast=len(set(keys)) == len(keys) and not any(map(_DEPENDS_ON, jobs)),
            has_keys=bool(keys),
        )

    def marks(self, created: Sequence[Job]) -> str:
        return encode_rows([[j.id, m.source, m.key, m.value] for j in created for m in self.watermarks.get(j.id, ())])


def raise_if_id_taken(exc: pg_errors.UniqueViolation) -> None:
    """A job id already in use is the caller's error (InvalidJob on ``id``), not a store failure."""
    if exc.diag.constraint_name == "jobs_pkey":
        raise InvalidJob("id", f"a job with this id already exists ({exc.diag.message_detail})") from None


def _new_job(plan: InsertPlan, i: int, state: JobState) -> Job:
    return _job(plan.jobs[i], plan.payloads[i], plan.phases[i], state, plan.now)


def _plain(new: NewJob, phases: tuple[Phase, ...]) -> bool:
    """The usual job: none of the optional fields a Job keeps, so it is built by position and its row stops
    after ``max_attempts``."""
    return (
        new.idempotency_key is None
        and not new.depends_on
        and new.timeout is None
        and not phases
        and new.run_id is None
        and new.schedule_id is None
        and new.trace is None
    )


def _job(new: NewJob, payload: Json, phases: tuple[Phase, ...], state: JobState, now: float) -> Job:
    run_at = new.run_at if new.run_at is not None else now
    if _plain(new, phases):
        # The usual job, by position (Job's first twelve fields, the rest default), as on every hot path
        # (docs/decisions/0020-positional-construction.md).
        return Job(new.id, new.tenant, new.queue, new.task, payload, new.priority, run_at, state, 0,
                   new.max_attempts, now, now)  # fmt: skip
    return Job(
        id=new.id, tenant=new.tenant, queue=new.queue, task=new.task, payload=payload,
        priority=new.priority, run_at=run_at, state=state, attempt=0,
        max_attempts=new.max_attempts, created_at=now, updated_at=now, idempotency_key=new.idempotency_key,
        depends_on=new.depends_on, timeout=new.timeout, phases=phases, run_id=new.run_id,
        schedule_id=new.schedule_id, trace=new.trace,
    )  # fmt: skip


def _job_rows(jobs: Sequence[Job]) -> str:
    return encode_rows([_job_row(j) for j in jobs])


def _job_row(j: Job) -> list[Any]:
    """A job as ``sql._SRC_COLUMNS`` reads it."""
    return [
        j.id,
        j.tenant,
        j.queue,
        j.task,
        j.payload,
        j.priority,
        j.run_at,
        j.state._value_,  # ``.value`` is a property: docs/decisions/0021-enqueue-client-instructions.md
        j.max_attempts,
        j.timeout,
        [p.to_json() for p in j.phases] if j.phases else None,
        j.idempotency_key,
        j.run_id,
        j.schedule_id,
        j.trace,
    ]


def _fast_batch(plan: InsertPlan) -> tuple[list[Job], list[list[Any]]]:
    """The jobs of a batch without dependencies, and their rows as INSERT_FAST's ``src`` reads them, in one
    pass: run_at null for a job that gave none (the statement's ``now``), and the optional columns left
    out when all are null (see ``sql._SRC``). The usual job is built by position from locals, cheaper than
    :func:`_job` and a row function (docs/decisions/0021-enqueue-client-instructions.md)."""
    now = plan.now
    queued = JobState.QUEUED
    jobs: list[Job] = []
    rows: list[list[Any]] = []
    for new, payload, phases in zip(plan.jobs, plan.payloads, plan.phases, strict=True):
        run_at = new.run_at
        # tr.initial_state with its dependencies done: queued unless run_at is in the future
        state = queued if run_at is None else tr.initial_state(new, now, True)
        if _plain(new, phases):
            id_, tenant, queue, task, priority, attempts = (
                new.id, new.tenant, new.queue, new.task, new.priority, new.max_attempts
            )  # fmt: skip
            jobs.append(Job(id_, tenant, queue, task, payload, priority, now if run_at is None else run_at, state,
                            0, attempts, now, now))  # fmt: skip
            rows.append([id_, tenant, queue, task, payload, priority, run_at, state._value_, attempts])
        else:
            job = _job(new, payload, phases, state, now)
            row = _job_row(job)
            row[6] = run_at
            jobs.append(job)
            rows.append(row)
    return jobs, rows


def _fast_params(plan: InsertPlan, jobs: Sequence[Job], rows: list[list[Any]], channel: str) -> dict[str, Any]:
    """INSERT_FAST's parameters; ``queues``: those of the queued jobs, which the statement NOTIFYs."""
    queued = JobState.QUEUED
    queues = sorted({j.queue for j in jobs if j.state is queued})
    return {"rows": encode_rows(rows), "marks": plan.marks(jobs), "now": plan.now, "channel": channel,
            "queues": queues}  # fmt: skip


async def insert_fast(conn: Conn, q: Queries, channel: str, plan: InsertPlan) -> Inserted | None:
    """One statement; None when an idempotency key of the batch is taken (the general path decides)."""
    now = plan.now
    jobs, rows = _fast_batch(plan)
    cur = conn.cursor(row_factory=tuple_row)
    if len(jobs) == 1 and not plan.has_keys and not plan.watermarks:
        row = _job_row(jobs[0])
        row.append(now)
        await cur.execute(q.insert_one, {"row": encode_rows(row)})
        one = await cur.fetchone()
        assert one is not None
        ids = [one[0]]
    else:
        await cur.execute(q.insert_fast, _fast_params(plan, jobs, rows, channel))
        many = await cur.fetchone()
        assert many is not None
        if not many[0]:
            return None
        ids = many[1]
    return Inserted(jobs=jobs, created=[True] * len(jobs), events=_enqueued(ids, jobs, now))


def writes_one(jobs: Sequence[NewJob], watermarks: Mapping[JobId, Sequence[Watermark]] | None) -> bool:
    """Whether ``jobs`` is one job that INSERT_ONE can write: no idempotency key, dependency or watermark."""
    return len(jobs) == 1 and not watermarks and jobs[0].idempotency_key is None and not jobs[0].depends_on


async def insert_one_outboxed(
    conn: Conn, q: Queries, plan: InsertPlan, headers: Mapping[str, str], held_until: float
) -> tuple[Inserted, int]:
    """One job (see :func:`writes_one`) and its outbox row in one statement that commits alone
    (``sql.INSERT_ONE_OUTBOXED``): what was written, and the outbox row's id."""
    jobs, _ = _fast_batch(plan)
    row = _job_row(jobs[0])
    row += [plan.now, dict(headers), held_until]
    cur = conn.cursor(row_factory=tuple_row)
    try:
        await cur.execute(q.insert_one_outboxed, {"row": encode_rows(row)})
    except pg_errors.UniqueViolation as exc:
        raise_if_id_taken(exc)
        raise
    one = await cur.fetchone()
    assert one is not None
    inserted = Inserted(jobs=jobs, created=[True], events=_enqueued([one[0]], jobs, plan.now))
    return inserted, int(one[1])


def pipes(jobs: Sequence[NewJob], watermarks: Mapping[JobId, Sequence[Watermark]] | None) -> bool:
    """Whether :func:`insert_piped` writes this batch: two chunks or more, no keys, dependencies or watermarks."""
    return (
        len(jobs) >= 2 * PIPE_CHUNK and not watermarks and not any(map(_KEY, jobs)) and not any(map(_DEPENDS_ON, jobs))
    )


async def insert_piped(
    conn: Conn, q: Queries, channel: str, jobs: Sequence[NewJob], now: float, phases: Sequence[tuple[str, ...]]
) -> Inserted:
    """A large batch (see :func:`pipes`) as one INSERT_FAST per chunk of ``PIPE_CHUNK`` jobs, sent without
    waiting in one pipeline, in one transaction: the client validates and encodes chunk k+1 while the server
    writes chunk k. All of it or none: a bad payload in a later chunk (InvalidJob, raised while encoding) or
    a taken id rolls the transaction back (InvalidJob on ``id``). Event ids ascend with the batch's order, as
    the chunks run in order. Never inside a caller's transaction (``insert_jobs_in`` takes the other paths).
    The gain is the client's share only; the server's writes are the floor
    (docs/decisions/0012-postgres-piped-batch-insert.md). A key, a dependency or a watermark needs the whole
    batch in one statement's guard."""
    sent: list[tuple[psycopg.AsyncCursor[Any], list[Job]]] = []
    try:
        async with conn.pipeline(), conn.transaction():
            for start in range(0, len(jobs), PIPE_CHUNK):
                end = start + PIPE_CHUNK
                part = InsertPlan.of(jobs[start:end], now, phases[start:end], None)
                built, rows = _fast_batch(part)
                cur = conn.cursor(row_factory=tuple_row)
                await cur.execute(q.insert_fast, _fast_params(part, built, rows, channel))
                sent.append((cur, built))
    except pg_errors.UniqueViolation as exc:
        raise_if_id_taken(exc)
        raise
    out: list[Job] = []
    events: list[Event] = []
    for cur, built in sent:
        row = await cur.fetchone()
        assert row is not None and row[0], "a batch without keys is always written"
        out += built
        events += _enqueued(row[1], built, now)
    return Inserted(jobs=out, created=[True] * len(out), events=events)


def _enqueued(ids: Sequence[int], jobs: Sequence[Job], now: float) -> list[Event]:
    """The ``job.enqueued`` events of jobs written by INSERT_FAST (its event data, built the same way)."""
    enqueued = ev.ENQUEUED
    return [
        Event(eid, now, enqueued, j.tenant, j.id, j.queue, j.task,
              {"state": j.state._value_, "attempt": 0, "priority": j.priority})
        for eid, j in zip(ids, jobs, strict=True)
    ]  # fmt: skip


async def insert_general(conn: Conn, q: Queries, channel: str, plan: InsertPlan) -> Inserted:
    """Idempotency keys and dependencies, in a transaction (or a savepoint of the caller's)."""
    for attempt in range(3):
        try:
            async with conn.transaction():
                return await _insert_general(conn, q, channel, plan)
        except pg_errors.UniqueViolation as exc:
            raise_if_id_taken(exc)
            # A key was taken by a transaction that committed meanwhile: look again, it is visible now.
            if attempt == 2:
                raise StoreError(f"idempotency key contention did not settle: {exc}") from exc
    raise AssertionError("unreachable")


async def _lookups(conn: Conn, q: Queries, jobs: Sequence[NewJob]) -> tuple[dict[tuple[str, str], Job], dict[str, Job]]:
    """The jobs that hold the batch's idempotency keys, and the parents outside the batch (locked, flagged)."""
    cur = conn.cursor(row_factory=tuple_row)
    by_key: dict[tuple[str, str], Job] = {}
    keyed = [j for j in jobs if j.idempotency_key is not None]
    if keyed:
        await cur.execute(
            q.find_by_keys, {"tenants": [j.tenant for j in keyed], "keys": [j.idempotency_key for j in keyed]}
        )
        for r in await cur.fetchall():
            job = job_from_row(r)
            assert job.idempotency_key is not None
            by_key[(job.tenant, job.idempotency_key)] = job
    batch_ids = {j.id for j in jobs}
    outside = sorted({d for j in jobs for d in j.depends_on if d not in batch_ids})
    parents: dict[str, Job] = {}
    if outside:
        await cur.execute(q.lock_parents, {"ids": outside})
        parents = {p.id: p for p in map(job_from_row, await cur.fetchall())}
        if missing := [d for d in outside if d not in parents]:
            # A parent claimed while we waited for its row was deleted and inserted again as running (see
            # sql._CLAIM_TAIL): a new statement finds it. Still missing, it does not exist.
            await cur.execute(q.lock_parents, {"ids": missing})
            parents.update((p.id, p) for p in map(job_from_row, await cur.fetchall()))
    return by_key, parents


async def _insert_general(conn: Conn, q: Queries, channel: str, plan: InsertPlan) -> Inserted:
    now, jobs = plan.now, plan.jobs
    by_key, parents = await _lookups(conn, q, jobs)
    staged: dict[str, Job] = {}
    staged_keys: dict[tuple[str, str], JobId] = {}
    out: list[Job] = []
    created: list[bool] = []
    written: list[Job] = []
    new_events: list[tuple[int, NewEvent]] = []  # (index in written, event)
    for i, new in enumerate(jobs):
        if new.idempotency_key is not None:
            key = (new.tenant, new.idempotency_key)
            staged_id = staged_keys.get(key)
            existing = staged[staged_id] if staged_id is not None else by_key.get(key)
            if existing is not None:
                mine = (new.task, new.queue, codec.dumps(plan.payloads[i]))
                if (existing.task, existing.queue, codec.dumps(existing.payload)) != mine:
                    raise IdempotencyConflict(new.idempotency_key, existing.id)
                out.append(existing)
                created.append(False)
                continue
        deps = []
        for dep_id in new.depends_on:
            dep = staged.get(dep_id) or parents.get(dep_id)
            if dep is None or dep.tenant != new.tenant:  # another tenant's job is not one this tenant can see
                raise UnknownDependency(dep_id)
            deps.append(dep)
        broken = next((d for d in deps if d.final_state in BREAKS_DEPENDENTS), None)
        job = _new_job(plan, i, tr.initial_state(new, now, all(d.final_state is JobState.SUCCEEDED for d in deps)))
        new_events.append((len(written), ev.job_event(ev.ENQUEUED, job, {"priority": job.priority})))
        if broken is not None:
            job, e = tr.cancel(job, f"dependency {broken.id} ended {broken.final_state.value}", now)
            new_events.append((len(written), e))
        staged[job.id] = job
        if new.idempotency_key is not None:
            staged_keys[(new.tenant, new.idempotency_key)] = job.id
        written.append(job)
        out.append(job)
        created.append(True)

    if not written:
        return Inserted(jobs=out, created=created, events=[])
    needed = {d for job in written for d in job.depends_on}
    params = {
        "rows": _job_rows(written),
        "extra": encode_rows([[list(j.depends_on), j.id in needed, j.reason, j.finished_at] for j in written]),
        "edges": encode_rows([[d, j.id] for j in written for d in j.depends_on]),
        "events": encode_rows([[e.type, k + 1, dict(e.data)] for k, e in new_events]),  # ordinality is 1-based
        "marks": plan.marks(written),
        "now": now,
        "channel": channel,
    }
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(q.insert_full, params)
    row = await cur.fetchone()
    assert row is not None
    events = [
        Event(eid, now, e.type, e.tenant, e.job_id, e.queue, e.task, e.data)
        for eid, (_, e) in zip(row[1], new_events, strict=True)
    ]
    return Inserted(jobs=tr.with_dependents(out, jobs), created=created, events=events)


async def recover(conn: Conn, q: Queries, jobs: Sequence[NewJob], now: float) -> Inserted | None:
    """What an insert whose connection was lost before its answer arrived committed: the batch as it was
    written (all of it: one transaction), or None when none of it was, so that the insert is run again.

    The ids are chosen before the first try, so a committed batch is found by them; ``created_at`` equal to
    the insert's ``now`` tells a job of this batch from another that happens to hold one of its ids (then
    the insert runs again and reports the taken id). A job that a repeated idempotency key turned into an
    existing one was never written under its own id: it is found by its key, as the insert had found it.
    The jobs are returned as they are now (a worker may have claimed them meanwhile), with the events the
    insert wrote."""
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(q.get, {"ids": [j.id for j in jobs]})
    mine = {job.id: job for job in map(job_from_row, await cur.fetchall()) if job.created_at == now}
    if not mine:
        return None
    by_key: dict[tuple[str, str], Job] = {}
    keyed = [j for j in jobs if j.id not in mine and j.idempotency_key is not None]
    if keyed:
        await cur.execute(
            q.find_by_keys, {"tenants": [j.tenant for j in keyed], "keys": [j.idempotency_key for j in keyed]}
        )
        for job in map(job_from_row, await cur.fetchall()):
            assert job.idempotency_key is not None
            by_key[(job.tenant, job.idempotency_key)] = job
    out: list[Job] = []
    created: list[bool] = []
    for new in jobs:
        found = mine.get(new.id)
        if found is None and new.idempotency_key is not None:
            found = by_key.get((new.tenant, new.idempotency_key))
        if found is None:
            raise StoreError(f"job {new.id} of a committed batch is missing (deleted meanwhile)")
        out.append(found)
        created.append(found.id == new.id)
    await cur.execute(q.inserted_events, {"ids": list(mine), "now": now})
    events = [event_from_row(r) for r in await cur.fetchall()]
    return Inserted(jobs=out, created=created, events=events)
