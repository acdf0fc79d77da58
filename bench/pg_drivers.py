"""jobengine's hot PostgreSQL statements through psycopg and asyncpg: ``python -m bench.pg_drivers --dsn ...``.

The statements are the store's own (``backends/postgres/sql.py``, on a schema migrated by the store), with
the parameters it sends, on a fresh database next to ``--dsn`` (dropped after):
- ``insert one``: INSERT_ONE, a single enqueue (one JSON row parameter);
- ``insert 1000``: INSERT_FAST with 1,000 jobs in one statement; ``insert 1000 piped`` is how the store
  writes such a batch (four statements of 250 in one pipeline and one transaction, ``insert.insert_piped``);
  ``insert 1000 many`` is INSERT_ONE once per job through the driver's ``executemany``;
- ``claim 100``: CLAIM_ONE of 100 queued jobs (a worker's fetch);
- ``complete 100``: COMPLETE of those 100 (a worker's batched outcome flush).

Each variant runs every statement ``--calls`` times on one connection of its own, as the store's calls do
(the pool's checkout is the store's cost, not the driver's, and left out); the jobs table is emptied between
variants. Variants run interleaved over ``--rounds`` rounds. Per statement: the median and p90 wall time of
a call, the client's CPU per call (``time.process_time``: the driver's encoding, protocol and decoding;
the parameters are built before the clock starts, the same for every variant) and the server backend's CPU
per call (``/proc/<backend pid>/stat``: the server must be on this machine). The client CPU figure moves
least with the machine's load.

Variants (``--variants``, a comma list):
- ``psycopg``: as the store runs them: an autocommit connection, binary cursors for claim and complete,
  psycopg's automatic preparation (``prepare_threshold`` 5) except for COMPLETE, which the store never
  prepares (docs/decisions/0002-postgres-replan-batch-transitions.md);
- ``psycopg-unprepared``: ``prepare_threshold=None`` (what the store does behind a pooler);
- ``psycopg-prepared``: ``prepare_threshold=0``, COMPLETE prepared too;
- ``psycopg-prepared-custom``: the same on a session with ``plan_cache_mode=force_custom_plan``, so that a
  prepared COMPLETE is still planned for each batch (what decision 0002 needs), the claim too;
- ``psycopg-text``: text cursors for claim and complete;
- ``asyncpg``: the same SQL with ``$n`` parameters, asyncpg's statement cache (every statement prepared);
- ``asyncpg-uncached``: ``statement_cache_size=0`` (an unnamed statement, planned at each call).

Needs asyncpg in the venv for the asyncpg variants (``pip install asyncpg``; not a jobengine dependency).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from bench import postgres
from jobengine.backends.postgres.rows import encode_rows
from jobengine.backends.postgres.sql import build, channel
from jobengine.backends.postgres.store import PostgresStore

SCHEMA = "jobengine"
QUEUE = "default"
TASK = "bench_noop"
STATEMENTS = ("insert one", "insert 1000", "insert 1000 piped", "insert 1000 many", "claim 100", "complete 100")
VARIANTS = (
    "psycopg", "psycopg-unprepared", "psycopg-prepared", "psycopg-prepared-custom", "psycopg-text", "asyncpg",
    "asyncpg-uncached",
)  # fmt: skip
#: Where the job columns start in a claim's rows (after ev_id, ev_type, ev_data), and the lease token.
_JOB = 3
_TOKEN = _JOB + 16


@dataclass
class Sample:
    wall: list[float] = field(default_factory=list)
    cpu: float = 0.0
    server: float = 0.0
    calls: int = 0


def _backend_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def positional(query: bytes) -> tuple[str, list[str]]:
    """psycopg's ``%(name)s`` query as asyncpg's ``$n`` one, and the names in ``$n`` order."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, query.decode())
    return text.replace("%%", "%"), names


def _plain_row(now: float) -> list[Any]:
    """A queued job as INSERT_FAST's compact row reads it (run_at null: the statement's now)."""
    return [uuid.uuid4().hex, "default", QUEUE, TASK, {"i": 1, "t": now}, 0, None, "queued", 3]


def _one_row(now: float) -> str:
    """A job as INSERT_ONE reads it: every column of sql._SRC_COLUMNS, then now."""
    row = _plain_row(now)
    row[6] = now
    return encode_rows([*row, None, None, None, None, None, None, now])


def _batch(n: int, now: float) -> dict[str, Any]:
    rows = [_plain_row(now) for _ in range(n)]
    return {"rows": encode_rows(rows), "marks": "[]", "now": now, "channel": channel(SCHEMA), "queues": [QUEUE]}


class Driver:
    """One variant's connection and how it runs a statement of the store."""

    pid: int

    async def open(self, dsn: str) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def rows(self, query: bytes, params: dict[str, Any], *, hot: bool = False, replan: bool = False) -> list[Any]:
        raise NotImplementedError

    async def piped(self, query: bytes, batches: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    async def many(self, query: bytes, params: list[dict[str, Any]]) -> None:
        raise NotImplementedError


class Psycopg(Driver):
    def __init__(
        self, prepare_threshold: int | None = 5, binary: bool = True, prepare_replan: bool = False, options: str = ""
    ) -> None:
        self._threshold, self._binary, self._prepare_replan = prepare_threshold, binary, prepare_replan
        self._options = {"options": options} if options else {}

    async def open(self, dsn: str) -> None:
        self.conn = await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, prepare_threshold=self._threshold, **self._options
        )
        self.pid = self.conn.info.backend_pid

    async def close(self) -> None:
        await self.conn.close()

    async def rows(self, query: bytes, params: dict[str, Any], *, hot: bool = False, replan: bool = False) -> list[Any]:
        # hot: claim and complete, which the store runs on binary cursors (PostgresStore._rows / _fetch).
        cur = self.conn.cursor(binary=self._binary, row_factory=tuple_row) if hot else self.conn.cursor()
        # replan: COMPLETE, which the store never prepares; psycopg-prepared prepares it at once.
        prepare = self._prepare_replan if replan else None
        await cur.execute(query, params, prepare=prepare)
        return await cur.fetchall()

    async def piped(self, query: bytes, batches: list[dict[str, Any]]) -> None:
        curs = []
        async with self.conn.pipeline(), self.conn.transaction():
            for params in batches:
                cur = self.conn.cursor()
                await cur.execute(query, params)
                curs.append(cur)
        for cur in curs:
            await cur.fetchone()

    async def many(self, query: bytes, params: list[dict[str, Any]]) -> None:
        async with self.conn.transaction(), self.conn.cursor() as cur:
            await cur.executemany(query, params)


class Asyncpg(Driver):
    def __init__(self, cache: bool = True) -> None:
        self._cache = cache
        self._texts: dict[bytes, tuple[str, list[str]]] = {}

    async def open(self, dsn: str) -> None:
        import asyncpg  # only for these variants

        self.conn = await asyncpg.connect(dsn, statement_cache_size=100 if self._cache else 0)
        self.pid = self.conn.get_server_pid()

    async def close(self) -> None:
        await self.conn.close()

    def _text(self, query: bytes) -> tuple[str, list[str]]:
        if query not in self._texts:
            self._texts[query] = positional(query)
        return self._texts[query]

    async def rows(self, query: bytes, params: dict[str, Any], *, hot: bool = False, replan: bool = False) -> list[Any]:
        text, names = self._text(query)
        return list(await self.conn.fetch(text, *[params[n] for n in names]))

    async def piped(self, query: bytes, batches: list[dict[str, Any]]) -> None:
        # asyncpg pipelines only executemany, which returns nothing: one statement after another.
        text, names = self._text(query)
        async with self.conn.transaction():
            for params in batches:
                await self.conn.fetchrow(text, *[params[n] for n in names])

    async def many(self, query: bytes, params: list[dict[str, Any]]) -> None:
        text, names = self._text(query)
        async with self.conn.transaction():
            await self.conn.executemany(text, [[p[n] for n in names] for p in params])


def driver(name: str) -> Driver:
    return {
        "psycopg": lambda: Psycopg(),
        "psycopg-unprepared": lambda: Psycopg(prepare_threshold=None),
        "psycopg-prepared": lambda: Psycopg(prepare_threshold=0, prepare_replan=True),
        "psycopg-prepared-custom": lambda: Psycopg(
            prepare_threshold=0, prepare_replan=True, options="-c plan_cache_mode=force_custom_plan"
        ),
        "psycopg-text": lambda: Psycopg(binary=False),
        "asyncpg": lambda: Asyncpg(),
        "asyncpg-uncached": lambda: Asyncpg(cache=False),
    }[name]()


async def timed(d: Driver, sample: Sample, call: Callable[[], Awaitable[Any]]) -> Any:
    server, cpu, wall = _backend_cpu(d.pid), time.process_time(), time.perf_counter()
    out = await call()
    sample.wall.append(time.perf_counter() - wall)
    sample.cpu += time.process_time() - cpu
    sample.server += _backend_cpu(d.pid) - server
    sample.calls += 1
    return out


async def one_variant(dsn: str, name: str, calls: int, batches: int, out: dict[str, Sample]) -> None:
    q = build(SCHEMA)
    d = driver(name)
    await d.open(dsn)
    try:
        now = time.time()
        for _ in range(calls):
            params = {"row": _one_row(now)}
            await timed(d, out["insert one"], lambda p=params: d.rows(q.insert_one, p))  # type: ignore[misc]
        for _ in range(batches):
            params = _batch(1000, now)
            await timed(d, out["insert 1000"], lambda p=params: d.rows(q.insert_fast, p))  # type: ignore[misc]
            parts = [_batch(250, now) for _ in range(4)]
            await timed(d, out["insert 1000 piped"], lambda p=parts: d.piped(q.insert_fast, p))  # type: ignore[misc]
        many = [{"row": _one_row(now)} for _ in range(1000)]
        await timed(d, out["insert 1000 many"], lambda: d.many(q.insert_one, many))
        worker = f"bench-{name}"
        for _ in range(calls):
            now = time.time()
            claim = {"queue": QUEUE, "limit": 100, "worker": worker, "expires": now + 30, "now": now,
                     "tasks": [TASK], "tenant": None}  # fmt: skip
            rows = await timed(d, out["claim 100"], lambda p=claim: d.rows(q.claim_one, p, hot=True))  # type: ignore[misc]
            done = [[r[_JOB], r[_TOKEN], None] for r in rows if r[0] is None]
            assert len(done) == 100, f"{name}: claimed {len(done)} jobs, expected 100"
            params = {"rows": encode_rows(done), "now": time.time(), "all": False}
            rows = await timed(
                d,
                out["complete 100"],
                lambda p=params: d.rows(q.complete, p, hot=True, replan=True),  # type: ignore[misc]
            )
            assert sum(1 for r in rows if r[0] is None) == 100, f"{name}: completed fewer than 100"
    finally:
        await d.close()


async def empty(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f"TRUNCATE {SCHEMA}.jobs, {SCHEMA}.events CASCADE")
        await conn.execute(f"VACUUM ANALYZE {SCHEMA}.jobs")


async def main_async(args: argparse.Namespace) -> None:
    database, drop = postgres.fresh_database(args.dsn)
    try:
        store = PostgresStore(database, schema=SCHEMA)
        await store.migrate()
        await store.close()
        variants = [v for v in args.variants.split(",") if v]
        results = {v: {s: Sample() for s in STATEMENTS} for v in variants}
        for r in range(args.rounds):
            for v in variants:
                await empty(database)
                load = os.getloadavg()[0]
                await one_variant(database, v, args.calls, args.batches, results[v])
                print(f"round {r + 1}/{args.rounds} {v} done (load {load:.2f})", flush=True)
        report(results)
    finally:
        drop()


def report(results: dict[str, dict[str, Sample]]) -> None:
    print(f"\n{'statement':18} {'variant':20} {'calls':>6} {'p50 ms':>8} {'p90 ms':>8} {'client CPU ms':>14} "
          f"{'server CPU ms':>14}")  # fmt: skip
    for s in STATEMENTS:
        for v, samples in results.items():
            x = samples[s]
            if not x.calls:
                continue
            ordered = sorted(x.wall)
            p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
            print(
                f"{s:18} {v:20} {x.calls:6} {1000 * statistics.median(x.wall):8.3f} {1000 * p90:8.3f} "
                f"{1000 * x.cpu / x.calls:14.3f} {1000 * x.server / x.calls:14.3f}"
            )
    print(f"\nload average after: {os.getloadavg()}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.pg_drivers", description=__doc__.split("\n")[0])
    p.add_argument("--dsn", default="postgresql://postgres@127.0.0.1/postgres")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma list of " + ", ".join(VARIANTS))
    p.add_argument("--rounds", type=int, default=3, help="rounds, variants interleaved in each")
    p.add_argument("--calls", type=int, default=200, help="single inserts, and claim + complete pairs")
    p.add_argument("--batches", type=int, default=20, help="1,000-job inserts (each way)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(main_async(parse(argv)))


if __name__ == "__main__":
    main()
