"""Every statement the PostgreSQL store runs, schema-qualified once at construction.

Each transition is one statement: data-modifying CTEs change the jobs, append their events and send the
NOTIFY in the same round trip. Statements that change jobs return rows of two kinds (see :func:`_changed`):
a changed job (``ev_id`` NULL, the job columns of :mod:`.rows`, extra columns named per statement), or an
event appended (``ev_id, ev_type, ev_data, job_id``).

Parameters are always cast (``%(x)s::text``): a text-format parameter is otherwise of unknown type, which
``jsonb_build_object`` cannot resolve. A batch travels as one JSON document, an array of rows that are
arrays (``%(rows)s``, read by :func:`_rows`): encoding it is one call in Python, where psycopg's array
dumpers cost microseconds per element, and a statement's text does not depend on the batch size, so psycopg
prepares it once per connection.

The ``%(all)s`` flag of complete / fail: when false, the statement changes nothing if a job of the batch has
dependents (``guard``), and leaves out any job whose dependents appeared meanwhile (the row lock of their
insert makes the update re-read ``has_dependents``). The caller finishes what was left on the slow path, in
order (see ``store.py``). This keeps the common case one statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from jobengine.backends.postgres.rows import N_JOB_COLUMNS, job_columns, job_names

_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

RUNNABLE = "('queued', 'scheduled', 'failed')"

# A phase left RUNNING by a dead process goes back to pending (its checkpoint stays): tr.start().
_RESET_IF_RUNNING = """CASE WHEN j.phases @> '[{"state": "running"}]' THEN (
        SELECT jsonb_agg(CASE WHEN p->>'state' = 'succeeded' THEN p ELSE jsonb_set(p, '{state}', '"pending"') END
                         ORDER BY o)
        FROM jsonb_array_elements(j.phases) WITH ORDINALITY AS x(p, o)) ELSE j.phases END"""

# A manual retry resets every phase that has not succeeded: tr.retry_now().
_RESET_ALL = """coalesce((
        SELECT jsonb_agg(CASE WHEN p->>'state' = 'succeeded' THEN p ELSE jsonb_set(p, '{state}', '"pending"') END
                         ORDER BY o)
        FROM jsonb_array_elements(j.phases) WITH ORDINALITY AS x(p, o)), '[]')"""

# The fence of every change to a running job is ``j.id = x.id AND j.lease_token = x.token``: a job holds a
# lease token exactly while it runs (every transition out of running clears it), so the state need not be
# tested too. Testing it would lead the planner to scan the partial index of all running jobs and hash-join
# them with the batch, instead of looking up the batch's ids: O(running jobs) per batch, not O(batch).
_CLEAR_LEASE = "lease_worker = NULL, lease_token = NULL, lease_expires_at = NULL"


def _row_exprs(columns: str) -> str:
    """``columns`` ("name type, ...") read by position from the jsonb array ``e``. A JSON null becomes SQL
    NULL, also for jsonb columns."""
    exprs = []
    for i, column in enumerate(c.split() for c in columns.split(",")):
        name, type_ = column
        if type_ == "text":
            exprs.append(f"e->>{i} AS {name}")
        elif type_ == "jsonb":
            exprs.append(f"nullif(e->{i}, 'null') AS {name}")
        else:
            exprs.append(f"(e->>{i})::{type_} AS {name}")
    return ", ".join(exprs)


def _rows(cte: str, columns: str, param: str = "rows", *, sized: bool = False) -> str:
    """A CTE over the JSON array parameter ``param``: one row per element (read by :func:`_row_exprs`),
    plus ``ord`` (1-based). jsonb, not json: json re-parses an element for every ``->>``
    (docs/decisions/0018-postgres-batch-statements.md). ``sized`` adds a LIMIT (the array's length: it
    removes nothing) for the planner, in the transitions that join the batch with the jobs table:
    jsonb_array_elements is always estimated at 100 rows, which made a small completion hash-join a seq scan
    of a large jobs table; with the LIMIT a plan made for this batch (the store does not prepare these
    statements) estimates at most the batch's size (docs/decisions/0002-postgres-replan-batch-transitions.md)."""
    return (
        f"{cte} AS (SELECT {_row_exprs(columns)}, ord "
        f"FROM jsonb_array_elements(%({param})s::jsonb) WITH ORDINALITY AS x(e, ord)"
        + (f" LIMIT jsonb_array_length(%({param})s::jsonb))" if sized else ")")
    )


_INSERT_EVENTS = "INSERT INTO {s}events (at, type, tenant, job_id, queue, task, data)"


def _changed(cte: str, order: str, *extra: str) -> str:
    """The final SELECT of a transition: the changed jobs of ``cte`` in ``order`` (``ev_*`` NULL, then the
    job columns, then ``extra``), followed by one row per event of ``ev`` (``ev_id, ev_type, ev_data,
    job_id``, the rest NULL). A UNION, not a join: both CTEs are estimated at one row, so a join becomes a
    nested loop that compares every job with every event (docs/decisions/0018-postgres-batch-statements.md)."""
    jobs = ", ".join([job_names(cte), *extra])
    nulls = ", ".join(["NULL"] * (N_JOB_COLUMNS - 1 + len(extra)))
    return (
        f"(SELECT NULL::int8, NULL::text, NULL::text, {jobs} FROM {cte} ORDER BY {order})\n"
        f"UNION ALL\n(SELECT ev.id, ev.type, ev.data, ev.job_id, {nulls} FROM ev)"
    )


def _ev(source: str, type_sql: str, data_sql: str, order: str, where: str = "") -> str:
    cond = f" WHERE {where}" if where else ""
    return (
        f"ev AS ({_INSERT_EVENTS} SELECT %(now)s::float8, {type_sql}, tenant, id, queue, task, {data_sql} "
        f"FROM {source}{cond} ORDER BY {order} RETURNING id, job_id, type, data::text AS data)"
    )


def _notify(source: str, where: str) -> str:
    return (
        f"n AS (SELECT pg_notify(%(channel)s::text, q) FROM (SELECT DISTINCT queue FROM {source} WHERE {where}) x(q))"
    )


def _finished(source: str, where: str = "true") -> str:
    """A CTE that wakes waiters for outcomes (``Engine.wait_for`` in any process) when ``source`` holds a job
    that reached a terminal state. One empty payload per statement: the waiters re-read the jobs they wait
    for, and PostgreSQL folds equal notifications of one transaction into one. It runs only if the final
    SELECT names it (an unreferenced SELECT CTE is never evaluated)."""
    return f"fin AS (SELECT pg_notify('{{finished}}', '') FROM (SELECT 1 FROM {source} WHERE {where} LIMIT 1) x)"


_J = job_columns("j")

_EV_STARTED = _ev(
    "started",
    "'job.started'",
    "jsonb_build_object('state', 'running', 'attempt', attempt, 'worker', %(worker)s::text)",
    "priority DESC, run_at, id",
)

_ALL_COLUMNS = (
    "id, tenant, queue, task, payload, priority, run_at, state, attempt, max_attempts, created_at, updated_at, "
    "idempotency_key, depends_on, timeout, lease_worker, lease_token, lease_expires_at, cancel_requested, reason, "
    "phases, progress, result, errors, outcome, started_at, finished_at, has_dependents, run_id, schedule_id, "
    "graph_id, trace"
)

# The claimed row is deleted and inserted again as running, not updated. Another claim whose snapshot still
# shows the job runnable then finds the row deleted and skips it; after an UPDATE it would follow the update
# chain, lock the running version, fail the re-check and keep that lock until it commits, so the worker
# that owns the job would wait on it to complete or heartbeat (tests/integration/postgres/test_claims.py
# watches pg_locks). A delete and an insert cost what a non-HOT update costs: a new tuple, new index entries
# (docs/decisions/0001-postgres-claim-by-delete-insert.md).
_CLAIM_TAIL = f"""
gone AS (
    DELETE FROM {{s}}jobs j USING picked WHERE j.id = picked.id RETURNING j.*
), started AS (
    INSERT INTO {{s}}jobs AS j ({_ALL_COLUMNS})
    SELECT id, tenant, queue, task, payload, priority, run_at, 'running', attempt + 1, max_attempts, created_at,
        %(now)s::float8, idempotency_key, depends_on, timeout, %(worker)s::text,
        replace(gen_random_uuid()::text, '-', ''), %(expires)s::float8, cancel_requested, reason,
        {_RESET_IF_RUNNING.replace("j.phases", "gone.phases")}, progress, result, errors, outcome,
        %(now)s::float8, finished_at, has_dependents, run_id, schedule_id, graph_id, trace
    FROM gone
    RETURNING {_J}
), {_EV_STARTED}
{_changed("started", "started.priority DESC, started.run_at, started.id")}"""

# Which jobs a claimer may take: those of its tasks (a worker claims only what it can run; NULL: any task)
# and of its tenant (a remote worker's key; NULL: any tenant). Rows of other tasks are skipped by the index
# walk without being locked.
_CLAIMABLE = """AND (%(tasks)s::text[] IS NULL OR task = ANY(%(tasks)s::text[]))
        AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)"""

# One queue: the runnable index (queue, priority DESC, run_at, id) is read in order from its head.
CLAIM_ONE = f"""WITH picked AS (
    SELECT id FROM {{s}}jobs
    WHERE queue = %(queue)s::text AND state IN {RUNNABLE} AND run_at <= %(now)s::float8
        {_CLAIMABLE}
    ORDER BY priority DESC, run_at, id LIMIT %(limit)s::int4
    FOR UPDATE SKIP LOCKED
),{_CLAIM_TAIL}"""

# Several queues: the head of each queue's index, merged. Rows locked but cut by the outer LIMIT are only
# skipped by other workers until this statement commits.
CLAIM_MANY = f"""WITH picked AS (
    SELECT c.id FROM unnest(%(queues)s::text[]) AS q(name) CROSS JOIN LATERAL (
        SELECT id, priority, run_at FROM {{s}}jobs
        WHERE queue = q.name AND state IN {RUNNABLE} AND run_at <= %(now)s::float8
            {_CLAIMABLE}
        ORDER BY priority DESC, run_at, id LIMIT %(limit)s::int4
        FOR UPDATE SKIP LOCKED
    ) c
    ORDER BY c.priority DESC, c.run_at, c.id LIMIT %(limit)s::int4
),{_CLAIM_TAIL}"""

# Given ids (the outbox's messages, the limited claim's choice): the same claim as fetch_jobs over those rows.
CLAIM_IDS = f"""WITH picked AS (
    SELECT id FROM {{s}}jobs WHERE id = ANY(%(ids)s::text[]) AND state IN {RUNNABLE} AND run_at <= %(now)s::float8
        AND (%(tasks)s::text[] IS NULL OR task = ANY(%(tasks)s::text[]))
    ORDER BY priority DESC, run_at, id FOR UPDATE SKIP LOCKED
),{_CLAIM_TAIL}"""

HEARTBEAT = f"""WITH {_rows("l", "id text, token text", sized=True)}
UPDATE {{s}}jobs j SET lease_expires_at = %(until)s::float8, updated_at = %(now)s::float8
FROM l WHERE j.id = l.id AND j.lease_token = l.token
RETURNING j.id, j.cancel_requested"""

_EV_PHASE = _ev(
    "upd",
    "'job.phase'",
    "jsonb_build_object('state', state, 'attempt', attempt) || event_data",
    "ord",
    "event_data IS NOT NULL",
)

_SAVE_COLUMNS = "id text, token text, phases jsonb, progress float8, event_data jsonb"
SAVE_PHASES = f"""WITH {_rows("u", _SAVE_COLUMNS, sized=True)}, upd AS (
    UPDATE {{s}}jobs j SET phases = u.phases, progress = u.progress, updated_at = %(now)s::float8
    FROM u WHERE j.id = u.id AND j.lease_token = u.token
    RETURNING {_J}, u.ord, u.event_data
), {_EV_PHASE}
{_changed("upd", "upd.ord")}"""

_EV_SUCCEEDED = _ev(
    "done",
    "'job.succeeded'",
    "jsonb_build_object('state', 'succeeded', 'attempt', attempt, "
    "'duration', %(now)s::float8 - coalesce(started_at, %(now)s::float8))",
    "ord",
)

COMPLETE = f"""WITH {_rows("c", "id text, token text, result jsonb", sized=True)}, guard AS (
    SELECT NOT EXISTS (
        SELECT 1 FROM {{s}}jobs j JOIN c ON j.id = c.id AND j.lease_token = c.token
        WHERE j.has_dependents) AS ok
), done AS (
    UPDATE {{s}}jobs j SET state = 'succeeded', result = c.result, progress = 1, finished_at = %(now)s::float8,
        updated_at = %(now)s::float8, cancel_requested = false, {_CLEAR_LEASE}
    FROM c
    WHERE j.id = c.id AND j.lease_token = c.token
      AND (%(all)s::bool OR ((SELECT ok FROM guard) AND NOT j.has_dependents))
    RETURNING {_J}, c.ord
), {_EV_SUCCEEDED},
wm AS (
    INSERT INTO {{s}}watermarks AS w (source, key, value, job_id, updated_at)
    SELECT DISTINCT ON (m.source, m.key) m.source, m.key, m.value, m.job_id, %(now)s::float8
    FROM {{s}}job_watermarks m JOIN done ON m.job_id = done.id
    ORDER BY m.source, m.key, m.value DESC
    ON CONFLICT (source, key) DO UPDATE
        SET value = EXCLUDED.value, job_id = EXCLUDED.job_id, updated_at = EXCLUDED.updated_at
        WHERE w.value < EXCLUDED.value
), {_finished("done")}
{_changed("done", "done.ord", "(SELECT count(*) FROM fin)")}"""

_FAIL_TYPE = "CASE how WHEN 'retry' THEN 'job.failed' WHEN 'dead' THEN 'job.dead' ELSE 'job.cancelled' END"
_FAIL_DATA = """CASE how
            WHEN 'retry' THEN jsonb_build_object('state', state, 'attempt', attempt, 'error', error->'message',
                                                 'error_type', error->'type', 'retry_at', run_at)
            WHEN 'dead' THEN jsonb_build_object('state', state, 'attempt', attempt, 'error', error->'message',
                                                'error_type', error->'type')
            ELSE jsonb_build_object('state', state, 'attempt', attempt, 'reason', reason) END"""

_FAIL_COLUMNS = "id text, token text, error jsonb, outcome text, retry_at float8, expired_at float8"
FAIL = f"""WITH {_rows("f", _FAIL_COLUMNS, sized=True)},
guard AS (
    SELECT NOT EXISTS (
        SELECT 1 FROM {{s}}jobs j JOIN f ON j.id = f.id AND j.lease_token = f.token
        WHERE j.has_dependents AND f.outcome <> 'retry') AS ok
), upd AS (
    UPDATE {{s}}jobs j SET
        state = CASE f.outcome WHEN 'retry' THEN 'failed' WHEN 'dead' THEN 'dead' ELSE 'cancelled' END,
        run_at = CASE WHEN f.outcome = 'retry' THEN f.retry_at ELSE j.run_at END,
        finished_at = CASE WHEN f.outcome = 'retry' THEN j.finished_at ELSE %(now)s::float8 END,
        reason = CASE f.outcome WHEN 'retry' THEN j.reason WHEN 'dead' THEN f.error->>'message'
                 ELSE coalesce(nullif(j.reason, ''), 'cancelled') END,
        errors = j.errors || jsonb_build_array(f.error),
        updated_at = %(now)s::float8, cancel_requested = false, {_CLEAR_LEASE}
    FROM f
    WHERE j.id = f.id AND j.lease_token = f.token
      AND (f.expired_at IS NULL OR j.lease_expires_at < f.expired_at)
      AND (%(all)s::bool OR ((SELECT ok FROM guard) AND (f.outcome = 'retry' OR NOT j.has_dependents)))
    RETURNING {_J}, f.ord, f.outcome AS how, f.error
), {_ev("upd", _FAIL_TYPE, _FAIL_DATA, "ord")},
{_notify("upd", "how = 'retry' AND run_at <= %(now)s::float8")},
{_finished("upd", "how <> 'retry'")}
{_changed("upd", "upd.ord", "(SELECT count(*) FROM n)", "(SELECT count(*) FROM fin)")}"""

RELEASE = f"""WITH {_rows("l", "id text, token text", sized=True)}, upd AS (
    UPDATE {{s}}jobs j SET state = 'queued', attempt = greatest(0, j.attempt - 1), updated_at = %(now)s::float8,
        {_CLEAR_LEASE}
    FROM l WHERE j.id = l.id AND j.lease_token = l.token
    RETURNING {_J}, l.ord
), {_ev("upd", "'job.released'", "jsonb_build_object('state', state, 'attempt', attempt)", "ord")},
{_notify("upd", "true")}
{_changed("upd", "upd.ord", "(SELECT count(*) FROM n)")}"""

# Cancel: jobs not yet running end at once; running ones are flagged (their worker sees it on its next
# heartbeat). Rows are locked in id order first, so two cancels of overlapping sets cannot deadlock.
_EV_CANCEL = _ev(
    "upd",
    "CASE WHEN state = 'running' THEN 'job.cancel_requested' ELSE 'job.cancelled' END",
    "jsonb_build_object('state', state, 'attempt', attempt, 'reason', reason)",
    "ord",
)

CANCEL = f"""WITH x AS (
    SELECT * FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS x(id, ord)
), locked AS (
    SELECT j.id, x.ord FROM {{s}}jobs j JOIN x ON j.id = x.id
    WHERE (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)
      AND (j.state IN ('blocked', 'scheduled', 'queued', 'failed') OR (j.state = 'running' AND NOT j.cancel_requested))
    ORDER BY j.id FOR NO KEY UPDATE OF j
), upd AS (
    UPDATE {{s}}jobs j SET
        cancel_requested = (j.state = 'running'),
        state = CASE WHEN j.state = 'running' THEN 'running' ELSE 'cancelled' END,
        reason = %(reason)s::text,
        finished_at = CASE WHEN j.state = 'running' THEN j.finished_at ELSE %(now)s::float8 END,
        updated_at = %(now)s::float8,
        lease_worker = CASE WHEN j.state = 'running' THEN j.lease_worker END,
        lease_token = CASE WHEN j.state = 'running' THEN j.lease_token END,
        lease_expires_at = CASE WHEN j.state = 'running' THEN j.lease_expires_at END
    FROM locked WHERE j.id = locked.id
    RETURNING {_J}, locked.ord
), {_EV_CANCEL},
{_finished("upd", "state = 'cancelled'")}
{_changed("upd", "upd.ord", "(SELECT count(*) FROM fin)")}"""

_EV_RETRIED = _ev(
    "upd", "'job.retried'", "jsonb_build_object('state', state, 'attempt', attempt, 'previous', previous)", "ord"
)

WITH_DEPENDENTS = """SELECT id FROM {s}jobs WHERE id = ANY(%(ids)s::text[]) AND has_dependents"""

RETRY = f"""WITH x AS (
    SELECT * FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS x(id, ord)
), locked AS (
    SELECT j.id, j.state AS previous, x.ord FROM {{s}}jobs j JOIN x ON j.id = x.id
    WHERE (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text) AND j.state IN ('dead', 'cancelled', 'failed')
    ORDER BY j.id FOR NO KEY UPDATE OF j
), upd AS (
    UPDATE {{s}}jobs j SET state = 'queued', attempt = 0, run_at = %(now)s::float8, finished_at = NULL,
        reason = NULL, cancel_requested = false, phases = {_RESET_ALL}, updated_at = %(now)s::float8
    FROM locked WHERE j.id = locked.id
    RETURNING {_J}, locked.ord, locked.previous
), {_EV_RETRIED},
{_notify("upd", "true")}
{_changed("upd", "upd.ord", "(SELECT count(*) FROM n)")}"""

# -- the slow path of jobs with dependents ---------------------------------------------------------------
# Lock the blocked dependents first; UNBLOCK then runs as its own statement, so its snapshot is taken after
# the locks were granted and sees every sibling parent that committed meanwhile (READ COMMITTED). A parent
# that is gone counts as succeeded: retention deletes only terminal jobs, and a dead or cancelled parent
# would have cancelled its dependents already.
# One dependency that has not succeeded keeps a job blocked; it is looked for from the newest down (a wide
# fan-in's newest parents end last), a scalar subquery because PostgreSQL drops the ORDER BY of an EXISTS.
LOCK_DEPENDENTS = """SELECT j.id FROM {s}jobs j
WHERE j.state = 'blocked' AND j.id IN (SELECT d.job_id FROM {s}job_dependencies d WHERE d.dep_id = ANY(%(ids)s::text[]))
ORDER BY j.id FOR NO KEY UPDATE"""

UNBLOCK = f"""WITH ub AS (
    UPDATE {{s}}jobs j SET state = CASE WHEN j.run_at > %(now)s::float8 THEN 'scheduled' ELSE 'queued' END,
        updated_at = %(now)s::float8
    WHERE j.id = ANY(%(ids)s::text[]) AND j.state = 'blocked' AND (
        SELECT d.dep_id FROM {{s}}job_dependencies d JOIN {{s}}jobs p ON p.id = d.dep_id WHERE d.job_id = j.id
          AND NOT (p.state = 'succeeded' OR (p.state = 'stale' AND p.outcome = 'succeeded'))
        ORDER BY d.dep_id DESC LIMIT 1) IS NULL
    RETURNING {_J}
), {_ev("ub", "'job.unblocked'", "jsonb_build_object('state', state, 'attempt', attempt)", "id")},
{_notify("ub", "state = 'queued'")}
{_changed("ub", "ub.id", "(SELECT count(*) FROM n)")}"""

# One step of the cancel cascade: the blocked dependents of one dead / cancelled job. Steps run as separate
# statements, so each sees dependents inserted (under the parent's row lock) before it started.
CASCADE = f"""WITH par AS (
    SELECT d.job_id, p.id AS parent, p.state AS pstate
    FROM {{s}}job_dependencies d JOIN {{s}}jobs p ON p.id = d.dep_id
    WHERE d.dep_id = %(id)s::text AND p.state IN ('dead', 'cancelled')
), cx AS (
    UPDATE {{s}}jobs j SET state = 'cancelled', reason = 'dependency ' || par.parent || ' ended ' || par.pstate,
        finished_at = %(now)s::float8, updated_at = %(now)s::float8, {_CLEAR_LEASE}
    FROM par WHERE j.id = par.job_id AND j.state = 'blocked'
    RETURNING {_J}
), {_ev("cx", "'job.cancelled'", "jsonb_build_object('state', state, 'attempt', attempt, 'reason', reason)", "id")},
{_finished("cx")}
{_changed("cx", "cx.id", "(SELECT count(*) FROM fin)")}"""

# -- insert ---------------------------------------------------------------------------------------------
_SRC_COLUMNS = (
    "id text, tenant text, queue text, task text, payload jsonb, priority int4, run_at float8, state text, "
    "max_attempts int4, timeout float8, phases jsonb, key text, run_id text, schedule_id text, trace text"
)
# A row may end early (``e->>i`` past its end is NULL) and give run_at as null for "now": INSERT_FAST's rows
# leave out the five optional columns when all are null, and run_at when the job gave none: shorter rows,
# less for the server to parse (docs/decisions/0022-postgres-compact-insert-rows.md).
_SRC = _rows("src", _SRC_COLUMNS).replace(
    "(e->>6)::float8 AS run_at", "coalesce((e->>6)::float8, %(now)s::float8) AS run_at", 1
)
assert "coalesce((e->>6)" in _SRC

_WATERMARKS = f"""{_rows("wm", "job_id text, source text, key text, value jsonb", "marks")}, wms AS (
    INSERT INTO {{s}}job_watermarks (job_id, source, key, value)
    SELECT job_id, source, key, value FROM wm WHERE (SELECT ok FROM go)
)"""

# The job columns an insert writes from ``src`` (shared by INSERT_FAST and INSERT_ONE).
_INSERT_JOBS = """INSERT INTO {s}jobs (id, tenant, queue, task, payload, priority, run_at, state, max_attempts,
                          created_at, updated_at, timeout, phases, idempotency_key, run_id, schedule_id, trace)
    SELECT id, tenant, queue, task, payload, priority, run_at, state, max_attempts, %(now)s::float8,
           %(now)s::float8, timeout, coalesce(phases, '[]'), key, run_id, schedule_id, trace
    FROM src"""
# The event data of the usual job (queued, priority 0) is a constant: jsonb_build_object per row pays the
# int to numeric conversion and the building, the constant (the same jsonb) nothing
# (docs/decisions/0022-postgres-compact-insert-rows.md).
_ENQUEUED = """SELECT %(now)s::float8, 'job.enqueued', tenant, id, queue, task,
           CASE WHEN priority = 0 AND state = 'queued' THEN '{"state": "queued", "attempt": 0, "priority": 0}'::jsonb
                ELSE jsonb_build_object('state', state, 'attempt', 0, 'priority', priority) END
    FROM src"""

# Jobs without dependencies, in one statement. ``go`` guards the idempotency keys: when any key of the batch
# is already taken, nothing is written and the caller takes the general path (which decides between
# returning the existing job and raising IdempotencyConflict). A key taken concurrently makes the unique
# index raise, and the caller takes the general path too. ``queues``: the distinct queues of the batch's queued
# jobs, which the caller knows (a DISTINCT over ``src`` would sort the batch:
# docs/decisions/0022-postgres-compact-insert-rows.md).
INSERT_FAST = f"""WITH {_SRC}, existing AS (
    SELECT e.id FROM src CROSS JOIN LATERAL (
        SELECT j.id FROM {{s}}jobs j WHERE j.tenant = src.tenant AND j.idempotency_key = src.key LIMIT 1) e
    WHERE src.key IS NOT NULL
), go AS (
    SELECT NOT EXISTS (SELECT 1 FROM existing) AS ok
), ins AS (
    {_INSERT_JOBS} WHERE (SELECT ok FROM go)
), {_WATERMARKS}, ev AS (
    {_INSERT_EVENTS}
    {_ENQUEUED} WHERE (SELECT ok FROM go) ORDER BY ord
    RETURNING id
), {_notify("unnest(%(queues)s::text[]) AS x(queue)", "(SELECT ok FROM go)")}
SELECT (SELECT ok FROM go), (SELECT array_agg(id ORDER BY id) FROM ev), (SELECT count(*) FROM n)"""


def _one_job(columns: str) -> str:
    """The job row and its event of a single enqueue, from one jsonb parameter of ``columns`` (``now`` among
    them): the statement's head up to its ``ev`` part, which returns the event id."""
    return f"""WITH src AS (
    SELECT {_row_exprs(_SRC_COLUMNS + columns)} FROM (SELECT %(row)s::jsonb AS e) r
), ins AS (
    {_INSERT_JOBS.replace("%(now)s::float8", "now")}
), ev AS (
    {_INSERT_EVENTS}
    {_ENQUEUED.replace("%(now)s::float8", "now")}
    RETURNING id
)"""


# One job without idempotency key or watermarks (a single enqueue): the same rows as INSERT_FAST from a
# statement cheaper on the server (no array function, sorts or guard), with one parameter (the row, ``now``
# last) and one value back (the event id), as each parameter and column costs the client instructions
# (docs/decisions/0019-postgres-single-enqueue-statement.md). The channel is written in (``{channel}``, the
# schema's). A keyed job goes through INSERT_FAST, whose guard writes nothing when the key is taken: a
# failed insert would still have used up an event id.
INSERT_ONE = f"""{_one_job(", now float8")}
SELECT (SELECT id FROM ev), (SELECT pg_notify('{{channel}}', queue) FROM src WHERE state = 'queued')"""

# INSERT_ONE with the job's outbox row (a broker transport): the row as INSERT_ONE's, then the message's
# headers and the hold (0: none), in one statement that commits alone, instead of a transaction of four
# round trips. Only a row due now is held, as ``outbox._INSERT`` does. Returns the event id and the outbox id.
INSERT_ONE_OUTBOXED = f"""{_one_job(", now float8, headers jsonb, held_until float8")}, ob AS (
    INSERT INTO {{s}}outbox (job_id, queue, available_at, headers, held_until)
    SELECT id, queue, run_at, coalesce(headers, '{{}}'), CASE WHEN run_at <= now THEN held_until ELSE 0 END
    FROM src
    RETURNING id
)
SELECT (SELECT id FROM ev), (SELECT id FROM ob),
    (SELECT pg_notify('{{channel}}', queue) FROM src WHERE state = 'queued')"""

# The general insert: states, events and dependency edges decided by the caller (in Python, mirroring the
# parity oracle) after it locked the parents. Event ids are assigned in ``ev_*`` order.
INSERT_FULL = f"""WITH {_SRC},
{_rows("extra", "depends_on jsonb, has_dependents bool, reason text, finished_at float8", "extra")},
go AS (
    SELECT true AS ok
), ins AS (
    INSERT INTO {{s}}jobs (id, tenant, queue, task, payload, priority, run_at, state, max_attempts, created_at,
                          updated_at, timeout, phases, idempotency_key, depends_on, has_dependents, reason,
                          finished_at, run_id, schedule_id, trace)
    SELECT s.id, s.tenant, s.queue, s.task, s.payload, s.priority, s.run_at, s.state, s.max_attempts,
           %(now)s::float8, %(now)s::float8, s.timeout, coalesce(s.phases, '[]'), s.key,
           ARRAY(SELECT jsonb_array_elements_text(e.depends_on)), e.has_dependents, e.reason, e.finished_at,
           s.run_id, s.schedule_id, s.trace
    FROM src s JOIN extra e ON e.ord = s.ord
), {_rows("ed", "dep_id text, job_id text", "edges")},
{_rows("v", "type text, job int8, data jsonb", "events")},
edges AS (
    INSERT INTO {{s}}job_dependencies (dep_id, job_id)
    SELECT DISTINCT dep_id, job_id FROM ed
), {_WATERMARKS}, ev AS (
    {_INSERT_EVENTS}
    SELECT %(now)s::float8, v.type, s.tenant, s.id, s.queue, s.task, v.data
    FROM v JOIN src s ON s.ord = v.job
    ORDER BY v.ord
    RETURNING id
), {_notify("src", "state = 'queued'")}
SELECT true, (SELECT array_agg(id ORDER BY id) FROM ev), (SELECT count(*) FROM n)"""

# The events an insert at ``now`` wrote for its jobs (read back when its answer was lost with its connection).
INSERTED_EVENTS = """SELECT id, at, type, tenant, job_id, queue, task, data::text FROM {s}events
WHERE job_id = ANY(%(ids)s::text[]) AND at = %(now)s::float8 AND type IN ('job.enqueued', 'job.cancelled')
ORDER BY id"""

FIND_BY_KEYS = f"""SELECT {_J} FROM {{s}}jobs j
JOIN unnest(%(tenants)s::text[], %(keys)s::text[]) AS k(tenant, key)
    ON j.tenant = k.tenant AND j.idempotency_key = k.key"""

# Lock the parents of new dependents (like an update, in id order) and flag them: a completion that was
# waiting on this lock then re-reads has_dependents and leaves the job to the slow path.
LOCK_PARENTS = f"""WITH l AS (
    SELECT {_J} FROM {{s}}jobs j WHERE j.id = ANY(%(ids)s::text[])
    ORDER BY j.id FOR NO KEY UPDATE
), f AS (
    UPDATE {{s}}jobs j SET has_dependents = true FROM l WHERE j.id = l.id AND NOT l.has_dependents
)
SELECT {job_names("l")} FROM l"""

# -- retention ------------------------------------------------------------------------------------------
# Stale jobs to delete first, then terminal ones to make stale, ``limit`` in all, each oldest first by the
# partial index of its step (jobs_stale_at, jobs_done_at): a pass reads the jobs it changes, not every job
# kept. One snapshot decides both steps, so no job is made stale and deleted in the same call. The jobs found
# are changed by primary key (``= ANY(ARRAY(…))``): joined with ``cand``, whose size the planner cannot know,
# the update was planned as a hash join over a scan of the whole table.
_FINISHED_AT = "coalesce(j.finished_at, j.updated_at)"
PRUNE = f"""WITH doomed AS (
    SELECT j.id, j.state FROM {{s}}jobs j
    WHERE j.state = 'stale' AND {_FINISHED_AT} < %(delete_before)s::float8
    ORDER BY {_FINISHED_AT} LIMIT %(limit)s::int4
    FOR UPDATE SKIP LOCKED
), done AS (
    SELECT j.id, j.state FROM {{s}}jobs j
    WHERE j.state IN ('succeeded', 'dead', 'cancelled') AND {_FINISHED_AT} < %(stale_before)s::float8
    ORDER BY {_FINISHED_AT} LIMIT greatest(0, %(limit)s::int4 - (SELECT count(*) FROM doomed))
    FOR UPDATE SKIP LOCKED
), cand AS (
    SELECT id, state FROM doomed UNION ALL SELECT id, state FROM done
), del AS (
    DELETE FROM {{s}}jobs j WHERE j.id = ANY(ARRAY(SELECT id FROM cand WHERE state = 'stale'))
    RETURNING j.id, j.tenant, j.queue, j.task, j.attempt
), deps AS (
    DELETE FROM {{s}}job_dependencies d USING del WHERE d.job_id = del.id
), marks AS (
    DELETE FROM {{s}}job_watermarks m USING del WHERE m.job_id = del.id
), st AS (
    UPDATE {{s}}jobs j SET state = 'stale', outcome = j.state, updated_at = %(now)s::float8
    WHERE j.id = ANY(ARRAY(SELECT id FROM cand WHERE state <> 'stale'))
    RETURNING j.id, j.tenant, j.queue, j.task, j.attempt, j.outcome
), ev AS (
    INSERT INTO {{s}}events (at, type, tenant, job_id, queue, task, data)
    SELECT %(now)s::float8, type, tenant, id, queue, task, data FROM (
        SELECT 'job.deleted' AS type, tenant, id, queue, task,
               jsonb_build_object('state', 'stale', 'attempt', attempt) AS data FROM del
        UNION ALL
        SELECT 'job.stale', tenant, id, queue, task,
               jsonb_build_object('state', 'stale', 'attempt', attempt, 'outcome', outcome) FROM st
    ) u ORDER BY id
    RETURNING id, at, type, tenant, job_id, queue, task, data::text
)
SELECT * FROM ev ORDER BY id"""

# -- reads ----------------------------------------------------------------------------------------------
EXPIRED = f"""SELECT {_J} FROM {{s}}jobs j
WHERE j.state = 'running' AND j.lease_expires_at < %(now)s::float8 ORDER BY j.id LIMIT %(limit)s::int4"""

GET = f"SELECT {_J} FROM {{s}}jobs j WHERE j.id = ANY(%(ids)s::text[])"

# Queued jobs always have run_at in the past, so the waiting index serves the future ones; the queued ones
# are few whenever a worker asks (it asks when it found nothing to claim).
# Only jobs of the asking worker's tasks count: one it cannot run must not keep it from sleeping.
_OF_TASKS = "(%(tasks)s::text[] IS NULL OR task = ANY(%(tasks)s::text[]))"
NEXT_RUN_AT = f"""SELECT least(
    (SELECT min(run_at) FROM {{s}}jobs
     WHERE queue = ANY(%(queues)s::text[]) AND state IN ('scheduled', 'failed') AND {_OF_TASKS}),
    (SELECT min(run_at) FROM {{s}}jobs WHERE queue = ANY(%(queues)s::text[]) AND state = 'queued' AND {_OF_TASKS}))"""

# The notifier's probe after (re)connecting: is anything runnable now? The database's clock stands in for
# the engine's; a wrong answer only costs a spurious wake-up or (with a clock far ahead) a poll interval.
ANY_RUNNABLE = f"""SELECT EXISTS (SELECT 1 FROM {{s}}jobs
    WHERE state IN {RUNNABLE} AND run_at <= extract(epoch FROM clock_timestamp()))"""

GET_WATERMARK = "SELECT value::text FROM {s}watermarks WHERE source = %(source)s::text AND key = %(key)s::text"


@dataclass(frozen=True, slots=True)
class Queries:
    """The statements above with the schema filled in (bytes: psycopg takes them as they are)."""

    claim_one: bytes
    claim_many: bytes
    heartbeat: bytes
    save_phases: bytes
    complete: bytes
    fail: bytes
    release: bytes
    cancel: bytes
    with_dependents: bytes
    retry: bytes
    lock_dependents: bytes
    unblock: bytes
    cascade: bytes
    insert_fast: bytes
    insert_one: bytes
    insert_one_outboxed: bytes
    insert_full: bytes
    find_by_keys: bytes
    inserted_events: bytes
    lock_parents: bytes
    prune: bytes
    expired: bytes
    get: bytes
    next_run_at: bytes
    get_watermark: bytes
    any_runnable: bytes


def check_schema(schema: str) -> str:
    if not _SCHEMA_RE.match(schema):
        raise ValueError(f"schema: {schema!r} must be a lower-case SQL identifier (letters, digits, _)")
    return schema


def prefix(schema: str) -> str:
    return f'"{check_schema(schema)}".'


def channel(schema: str) -> str:
    """The NOTIFY channel of a schema's store (one per schema: two stores in one database do not wake each
    other)."""
    return f"jobengine_{check_schema(schema)}"[:63]


def finished_channel(schema: str) -> str:
    """The NOTIFY channel of a schema's finished jobs (``.`` never appears in a schema name, so it is never
    the channel of work, :func:`channel`)."""
    return f"jobengine.finished.{check_schema(schema)}"[:63]


def build(schema: str) -> Queries:
    s = prefix(schema)
    work, finished = channel(schema), finished_channel(schema)
    values = {
        f.name: globals()[f.name.upper()]
        .replace("{s}", s)
        .replace("{channel}", work)
        .replace("{finished}", finished)
        .encode()
        for f in fields(Queries)
    }
    return Queries(**values)
