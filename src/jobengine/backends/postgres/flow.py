"""Flow control (:class:`jobengine.ports.flow.FlowStore`) on PostgreSQL: limits, token buckets and the
limited claim (tables: migration ``0007_flow.sql``). Mixed into :class:`PostgresStore`.

The limited claim is one transaction that first takes a transaction-level advisory lock on the queue
(``pg_advisory_xact_lock``), so limited claims of one queue run one at a time across every process; each
of its statements then reads (READ COMMITTED) what the previous claimer committed. It counts running jobs
(per key), reads the candidates and buckets, starts the chosen jobs with the claim-by-id statement
(``sql.CLAIM_IDS``: the same row rewrite and ``job.started`` events as ``fetch_jobs``) and writes the
buckets back. Completions need no lock: they only free slots.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from psycopg.types.json import Jsonb

from jobengine.backends.postgres.changes import Collect
from jobengine.backends.postgres.mixin import Row, StoreCalls, qualify
from jobengine.backends.postgres.sql import CLAIM_IDS, RUNNABLE
from jobengine.core.flow.bucket import Bucket
from jobengine.core.flow.select import Candidate, ClaimRule, select
from jobengine.core.ids import WorkerId
from jobengine.core.models import Changed

Conn = Any

_UPSERT_BUCKETS: Final = """INSERT INTO {s}flow_buckets (key, tokens, updated_at)
SELECT b.key, b.tokens, b.at FROM jsonb_to_recordset(%(b)s::jsonb) AS b(key text, tokens float8, at float8)
ON CONFLICT (key) DO UPDATE SET tokens = EXCLUDED.tokens, updated_at = EXCLUDED.updated_at"""


_CLAIM_AND_BUCKETS: Final = "WITH bk AS (" + _UPSERT_BUCKETS + " RETURNING 1), " + CLAIM_IDS.removeprefix("WITH ")
assert CLAIM_IDS.startswith("WITH ")

#: A bucket's key in SQL, as jobengine.core.flow.limits.bucket_key writes it (the contract suite holds them equal).
_BUCKET_SQL: Final = {
    "queue": "'q' || chr(31) || queue",
    "tenant": "'tq' || chr(31) || tenant || chr(31) || queue",
    "task": "'tt' || chr(31) || tenant || chr(31) || task",
}


def _reads(rule: ClaimRule) -> str:
    """One statement for what the choice needs: running jobs per key (kind 0), candidates in claim order
    (kind 1) and the buckets they take from (kind 2)."""
    key_sql = _key_sql(rule)
    buckets = ""
    if rule.rate is not None and rule.limits is not None:
        buckets = (f"UNION ALL SELECT 2, b.key, NULL, NULL, NULL, b.tokens, b.updated_at, 0 FROM {{s}}flow_buckets b "
                   f"WHERE b.key IN (SELECT {_BUCKET_SQL[rule.limits.rate_per]} FROM cands)")  # fmt: skip
    return f"""WITH cands AS (
    SELECT id, tenant, task, queue, priority, run_at, {key_sql} AS k FROM {{s}}jobs
    WHERE queue = %(queue)s::text AND state IN {RUNNABLE} AND run_at <= %(now)s::float8
      AND (%(tasks)s::text[] IS NULL OR task = ANY(%(tasks)s::text[]))
      AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
      AND (%(ids)s::text[] IS NULL OR id = ANY(%(ids)s::text[]))
    ORDER BY priority DESC, run_at, id LIMIT %(n)s::int4
)
SELECT 0, NULL::text, NULL::text, NULL::text, {key_sql}, count(*)::float8, NULL::float8, 0::int8 FROM {{s}}jobs
    WHERE state = 'running' AND queue = %(queue)s::text GROUP BY 5
UNION ALL SELECT 1, id, tenant, task, k, NULL, NULL, row_number() OVER (ORDER BY priority DESC, run_at, id) FROM cands
{buckets}"""


def _key_sql(rule: ClaimRule) -> str:
    if rule.key == "task":
        return "task"
    if rule.key == "tenant":
        return "tenant"
    if rule.payload_field is not None:
        return "payload ->> %(field)s::text"
    return "NULL::text"


async def _all(conn: Conn, query: bytes, params: Mapping[str, Any]) -> list[Row]:
    cur = conn.cursor(binary=True)
    await cur.execute(query, params)
    return list(await cur.fetchall())


class PostgresFlowMixin:
    async def claim_limited(
        self: StoreCalls, rule: ClaimRule, limit: int, worker: WorkerId, lease_seconds: float, now: float
    ) -> Changed:
        if limit <= 0:
            return Changed()
        base = {"queue": rule.queue, "now": now, "field": rule.payload_field or ""}
        lock = f"jobengine-flow:{self.schema}:{rule.queue}"

        reads = qualify(self, _reads(rule))
        params = {**base, "n": rule.candidates(limit), "tenant": rule.tenant,
                  "tasks": list(rule.tasks) if rule.tasks is not None else None,
                  "ids": list(rule.ids) if rule.ids is not None else None}  # fmt: skip

        async def op(conn: Conn) -> Changed:
            async with conn.transaction():
                # Its own statement: the reads after it take their snapshot once the lock is held.
                await _all(conn, b"SELECT pg_advisory_xact_lock(hashtextextended(%(k)s::text, 0))", {"k": lock})
                queue_running, key_running = 0, {}
                candidates: list[tuple[int, Candidate]] = []
                buckets: dict[str, Bucket] = {}
                for kind, ident, tenant, task, key, num, at, order in await _all(conn, reads, params):
                    if kind == 0:
                        queue_running += int(num)
                        if key is not None and rule.key is not None:
                            key_running[str(key)] = int(num)
                    elif kind == 1:
                        candidates.append((int(order), Candidate(ident, tenant, task, key)))
                    else:
                        buckets[ident] = Bucket(num, at)
                if not candidates:
                    return Changed()
                candidates.sort(key=lambda c: c[0])
                chosen = select(rule, [c for _, c in candidates], queue_running=queue_running,
                                key_running=key_running, buckets=buckets, now=now, limit=limit)  # fmt: skip
                if not chosen.ids:
                    return Changed()
                claim = {"ids": chosen.ids, "worker": worker, "expires": now + lease_seconds, "now": now, "tasks": None}
                query = CLAIM_IDS
                if chosen.buckets:  # written by the claim statement itself (one round trip)
                    rows = [{"key": k, "tokens": b.tokens, "at": b.at} for k, b in chosen.buckets.items()]
                    claim["b"] = Jsonb(rows)
                    query = _CLAIM_AND_BUCKETS
                out = Collect(now)
                out.add(await _all(conn, qualify(self, query), claim))
                return out.changed()

        return await self._run(op, retry=False)  # a claim that committed must not run twice
