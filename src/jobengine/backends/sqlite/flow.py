"""Flow control (:class:`jobengine.ports.flow.FlowStore`) on SQLite: limits, token buckets and the limited
claim (tables: migration ``0007_flow.sql``). Mixed into :class:`SqliteStore`.

The limited claim is one ``BEGIN IMMEDIATE`` transaction: the write lock, shared by every process on the
file, serialises it with every other claim, so counting running jobs, reading buckets, starting the chosen
jobs and writing the buckets back cannot interleave with another worker's. A claim that chooses nothing
writes nothing (so it does not wake the other processes' notifiers).
"""

from __future__ import annotations

import sqlite3
from typing import Final

from jobengine.core.flow.bucket import Bucket
from jobengine.core.flow.limits import bucket_key
from jobengine.core.flow.select import Candidate, ClaimRule, select
from jobengine.core.ids import JobId, WorkerId
from jobengine.core.models import Changed

from . import fenced
from .db import StoreCalls
from .rows import RUNNABLE_SQL

_UPSERT_BUCKET: Final = (
    "INSERT INTO flow_buckets (key, tokens, updated_at) VALUES (?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at"
)


def _key_sql(rule: ClaimRule) -> tuple[str, list[object]]:
    """The SQL expression of the rule's concurrency key over ``jobs`` and its parameters."""
    if rule.key == "task":
        return "task", []
    if rule.key == "tenant":
        return "tenant", []
    name = rule.payload_field
    if name is not None:
        return "CAST(json_extract(payload, ?) AS TEXT)", [f"$.{name}"]
    return "NULL", []


def claim_limited(
    conn: sqlite3.Connection, rule: ClaimRule, limit: int, worker: WorkerId, lease: float, now: float
) -> fenced.Applied:
    """In the transaction: choose (jobengine.core.flow.select), start the chosen, write the buckets taken from."""
    q = rule.queue
    key_sql, key_params = _key_sql(rule)
    queue_running = conn.execute("SELECT count(*) FROM jobs WHERE state = 'running' AND queue = ?", [q]).fetchone()[0]
    key_running: dict[str, int] = {}
    if rule.key is not None:
        rows = conn.execute(
            f"SELECT {key_sql}, count(*) FROM jobs WHERE state = 'running' AND queue = ? GROUP BY 1",
            [*key_params, q],
        ).fetchall()
        key_running = {str(k): int(n) for k, n in rows if k is not None}
    only, only_params = "", []
    if rule.tasks is not None:
        only += f" AND task IN ({','.join('?' * len(rule.tasks))})" if rule.tasks else " AND 0"
        only_params += list(rule.tasks)
    if rule.tenant is not None:
        only += " AND tenant = ?"
        only_params.append(rule.tenant)
    if rule.ids is not None:
        only += f" AND id IN ({','.join('?' * len(rule.ids))})" if rule.ids else " AND 0"
        only_params += list(rule.ids)
    cand_rows = conn.execute(
        f"SELECT id, tenant, task, {key_sql} FROM jobs WHERE {RUNNABLE_SQL} AND queue = ? AND run_at <= ?{only} "
        "ORDER BY priority DESC, run_at, id LIMIT ?",
        [*key_params, q, now, *only_params, rule.candidates(limit)],
    ).fetchall()
    if not cand_rows:
        return fenced.Applied()
    candidates = [Candidate(r[0], r[1], r[2], None if r[3] is None else str(r[3])) for r in cand_rows]
    buckets: dict[str, Bucket] = {}
    if rule.rate is not None and rule.limits is not None:
        keys = sorted({bucket_key(rule.limits, c.tenant, c.task) for c in candidates})
        marks = ",".join("?" * len(keys))
        for key, tokens, at in conn.execute(
            f"SELECT key, tokens, updated_at FROM flow_buckets WHERE key IN ({marks})", keys
        ).fetchall():
            buckets[key] = Bucket(tokens, at)
    chosen = select(
        rule, candidates, queue_running=queue_running, key_running=key_running, buckets=buckets, now=now, limit=limit
    )
    if not chosen.ids:
        return fenced.Applied()
    if chosen.buckets:
        conn.executemany(_UPSERT_BUCKET, [(k, b.tokens, b.at) for k, b in chosen.buckets.items()])
    return fenced.claim_ids(conn, [JobId(i) for i in chosen.ids], worker, lease, now, None)


class SqliteFlowMixin:
    async def claim_limited(
        self: StoreCalls, rule: ClaimRule, limit: int, worker: WorkerId, lease_seconds: float, now: float
    ) -> Changed:
        if limit <= 0:
            return Changed()
        # A WAL read first: nothing due means no write lock (as fetch_jobs).
        if not await self._read(lambda c: fenced.any_due(c, [rule.queue], now)):
            return Changed()
        return await self._work(
            lambda c: claim_limited(c, rule, limit, worker, lease_seconds, now),
            lambda a: fenced.claimed(a, worker, now),
        )
