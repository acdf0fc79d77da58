"""The standard workload on an empty store and on one that keeps N finished jobs: ``python -m bench.growth``.

The grown store is filled as the engine writes finished jobs: ``--seed`` real jobs run through the engine to
completion (the standard no-op task, workers at the product's defaults), then every row they left (the
``jobs`` row and its events; the seed run shows no other table holding rows of a finished job, and the
fill stops if one does) is replicated with ``INSERT … SELECT … generate_series`` under fresh UUIDv7 ids
whose time lies in the days before the run, so they sort before every job of the benchmark, and finally
``VACUUM ANALYZE`` as autovacuum would have run. Each phase then starts from the grown store as filled:
the rows a phase added (ids after the fill) are deleted and the tables vacuumed before the next phase, which
costs seconds instead of copying gigabytes per phase from a template.

The phases, workers and measures are those of ``python -m bench`` (``bench/phases.py``), with jobengine at
its defaults (the product's worker settings, as ``jobengine worker`` with no flags). Runs are interleaved
(empty, grown, empty, grown …). Besides rates and latencies, each round reports CPU seconds per 1,000 jobs
of the benchmark process (producer), of the worker processes and of the PostgreSQL backends serving the
phase's database (``/proc/PID/stat`` of every backend, sampled every 0.2 s), figures that move far less
with the machine's load than rates do.

    python -m bench.growth --dsn postgresql://postgres@127.0.0.1/postgres --finished 1000000
    python -m bench.growth --dsn … --finished 5000000 --keep        # print the grown database, keep it
    python -m bench.growth --dsn … --grown growth_1a2b3c4d_grown    # reuse a kept one (no fill)
    python -m bench.growth --backend sqlite --finished 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import resource
import shutil
import signal
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from bench import postgres
from bench.config import PHASES, BenchConfig, WorkerSetting
from bench.cpu import cpu_seconds
from bench.phases import Context, Measure, run_round
from bench.run import load
from bench.stores import FreshStore, fresh_store

#: Where the fill's ids lie: finished within the last days, all younger than the default ``stale_after``
#: (7 days), so retention keeps every one of them, as a store that keeps a week of jobs does.
SPAN_DAYS = 6.0
SCHEMA = "jobengine"
CHUNK = 250_000  # jobs replicated per statement (one transaction each)


def default_setting() -> WorkerSetting:
    """The product's worker settings: ``jobengine worker`` with no flags."""
    from jobengine.settings import Settings

    d = Settings()
    return WorkerSetting(2, d.worker_concurrency, d.fetch_batch, d.poll_interval, d.lease_seconds, None)


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {load()}] {text}", file=sys.stderr, flush=True)


# -- PostgreSQL -------------------------------------------------------------------------------------------
#: The application_name of a grown store's reset: work of the bench, which :class:`PgCpu` leaves out.
RESET = "jobengine-bench-reset"


def _pg(url: str, application_name: str = "jobengine-bench") -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True, application_name=application_name)


@dataclass
class PgGrown:
    """A grown PostgreSQL store: its database and the last job id and event id of the fill."""

    admin_dsn: str
    name: str
    url: str
    last_job: str
    last_event: int
    finished: int

    def reset(self) -> None:
        """Back to the store as filled: delete what a phase added, vacuum the tables it touched, and write
        the pages that made dirty before the phase starts (its VACUUM reads every index of the 5,000,000
        jobs' tables, which a phase on an empty store never pays)."""
        with _pg(self.url, RESET) as conn:
            conn.execute(f"DELETE FROM {SCHEMA}.events WHERE id > %s", (self.last_event,))
            for table in _pg_job_tables(conn):
                conn.execute(f"DELETE FROM {SCHEMA}.{table} WHERE job_id > %s", (self.last_job,))
            conn.execute(f"DELETE FROM {SCHEMA}.jobs WHERE id > %s", (self.last_job,))
            conn.execute(f"DELETE FROM {SCHEMA}.workers")
            # Not in parallel: the workers of a parallel VACUUM are backends of the database, which PgCpu counts.
            conn.execute(f"VACUUM (PARALLEL 0) {SCHEMA}.jobs, {SCHEMA}.events")
            conn.execute("CHECKPOINT")

    def store(self) -> FreshStore:
        self.reset()
        return FreshStore(self.url, lambda: None)


def _pg_job_tables(conn: Any) -> list[str]:
    """Every table of the store but ``events`` with a ``job_id`` column: what else a job may leave rows in."""
    rows = conn.execute(
        "SELECT table_name FROM information_schema.columns WHERE table_schema = %s AND column_name = 'job_id'"
        " AND table_name <> 'events' ORDER BY 1",
        (SCHEMA,),
    ).fetchall()
    return [r[0] for r in rows]


def _pg_database(admin_dsn: str, name: str) -> str:
    from psycopg.conninfo import make_conninfo

    with _pg(admin_dsn) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return postgres._as_url(make_conninfo(admin_dsn, dbname=name))


def _pg_drop(admin_dsn: str, name: str) -> None:
    with _pg(admin_dsn) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# The id of filler job g, made as core/ids.py makes one: the millisecond, version 7, a 12-bit counter (g
# modulo 4096: far fewer than 4096 filler jobs share a millisecond), the variant and random-looking bits.
_PG_ID = """substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || lpad(to_hex(mod(g, 4096)), 3, '0') || '-8'
    || substr(m, 1, 3) || '-' || substr(m, 4, 12)"""
_TIMES = ("run_at", "created_at", "updated_at", "started_at", "finished_at", "lease_expires_at")


def pg_fill(admin_dsn: str, finished: int, seed: int, logdir: str, cfg: BenchConfig) -> PgGrown:
    tag = os.urandom(4).hex()
    name = f"growth_{tag}_grown"
    url = _pg_database(admin_dsn, name)
    started = time.perf_counter()
    say(f"fill: {seed:,} real jobs through the engine into {name}")
    _seed_run(cfg, logdir, seed, url)
    seeded = time.perf_counter()
    with _pg(url) as conn:
        conn.execute(f"SET search_path = {SCHEMA}")
        counts = {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for (t,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s AND table_type = 'BASE TABLE'"
                " ORDER BY 1",
                (SCHEMA,),
            ).fetchall()
        }
        say("fill: rows after the seed run: " + ", ".join(f"{t} {n:,}" for t, n in counts.items() if n))
        if others := [t for t in _pg_job_tables(conn) if counts.get(t)]:
            raise SystemExit(f"fill: a finished job left rows in {others}: replicate them too")
        states = conn.execute("SELECT state, count(*) FROM jobs GROUP BY 1").fetchall()
        if states != [("succeeded", seed)]:
            raise SystemExit(f"fill: the seed jobs are not all succeeded: {states}")
        conn.execute("CREATE TEMP TABLE seed_jobs AS SELECT row_number() OVER (ORDER BY id) - 1 AS k, * FROM jobs")
        conn.execute(
            "CREATE TEMP TABLE seed_events AS SELECT s.k, e.id AS ord, e.at - s.created_at AS off, e.type, e.tenant,"
            " e.queue, e.task, e.data FROM events e JOIN seed_jobs s ON s.id = e.job_id"
        )
        conn.execute("CREATE INDEX ON seed_events (k, ord)")
        conn.execute("ANALYZE seed_jobs; ANALYZE seed_events")
        columns = [r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = 'jobs'"
            " ORDER BY ordinal_position", (SCHEMA,)).fetchall()]  # fmt: skip
        exprs = ["x.id" if c == "id" else (f"s.{c} + x.shift" if c in _TIMES else f"s.{c}") for c in columns]
        count = finished - seed
        t0 = time.time() - SPAN_DAYS * 86400 - 3600
        step = SPAN_DAYS * 86400 / max(1, count)
        # x: the filler job g, its created_at (at), its id, and how far its times lie from its seed job's.
        lateral = f"""FROM generate_series(%(lo)s::int8, %(hi)s::int8) g
            JOIN seed_jobs s ON s.k = mod(g, %(seed)s)
            CROSS JOIN LATERAL (SELECT %(t0)s::float8 + g * %(step)s::float8 AS at) t
            CROSS JOIN LATERAL (SELECT lpad(to_hex(floor(t.at * 1000)::int8), 12, '0') AS h, md5(g::text) AS m) p
            CROSS JOIN LATERAL (SELECT {_PG_ID} AS id, t.at - s.created_at AS shift) x"""
        insert_jobs = f"INSERT INTO jobs ({', '.join(columns)}) SELECT {', '.join(exprs)} {lateral} ORDER BY g"
        insert_events = f"""INSERT INTO events (at, type, tenant, job_id, queue, task, data)
            SELECT t.at + e.off, e.type, e.tenant, x.id, e.queue, e.task, e.data {lateral}
            JOIN seed_events e ON e.k = s.k ORDER BY g, e.ord"""
        for lo in range(0, count, CHUNK):
            params = {"lo": lo, "hi": min(count, lo + CHUNK) - 1, "seed": seed, "t0": t0, "step": step}
            with conn.transaction():
                conn.execute(insert_jobs, params)
                conn.execute(insert_events, params)
            say(f"fill: {min(count, lo + CHUNK):,} / {count:,} replicated")
        replicated = time.perf_counter()
        conn.execute("VACUUM ANALYZE")
        last_job = conn.execute("SELECT max(id) FROM jobs").fetchone()[0]
        last_event = conn.execute("SELECT max(id) FROM events").fetchone()[0]
        conn.execute("CREATE TABLE public.growth_fill (last_job text, last_event int8, finished int8)")
        conn.execute("INSERT INTO public.growth_fill VALUES (%s, %s, %s)", (last_job, last_event, finished))
        sizes = conn.execute(
            "SELECT relname, pg_size_pretty(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n"
            " ON n.oid = c.relnamespace WHERE n.nspname = %s AND relname IN ('jobs', 'events')", (SCHEMA,)
        ).fetchall()  # fmt: skip
    done = time.perf_counter()
    say(
        f"fill: {finished:,} finished jobs in {done - started:,.0f} s (seed run {seeded - started:,.0f} s, "
        f"replication {replicated - seeded:,.0f} s, VACUUM ANALYZE {done - replicated:,.0f} s); "
        + ", ".join(f"{t} {s}" for t, s in sizes)
    )
    return PgGrown(admin_dsn, name, url, last_job, last_event, finished)


def pg_reuse(admin_dsn: str, name: str) -> PgGrown:
    from psycopg.conninfo import make_conninfo

    url = postgres._as_url(make_conninfo(admin_dsn, dbname=name))
    with _pg(url) as conn:
        last_job, last_event, finished = conn.execute("SELECT * FROM public.growth_fill").fetchone()
    return PgGrown(admin_dsn, name, url, last_job, last_event, finished)


class PgCpu:
    """CPU seconds of the PostgreSQL backends serving the given databases, from ``/proc/PID/stat`` sampled
    every ``period`` s (a backend first seen after the start counts from zero). Needs the server on this
    machine."""

    def __init__(self, admin_dsn: str, databases: set[str], period: float = 0.2) -> None:
        self._dsn, self._dbs, self._period = admin_dsn, databases, period
        self._base: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self, conn: Any, into: dict[int, float]) -> None:
        pids = [r[0] for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = ANY(%s) AND application_name <> %s",
            (list(self._dbs), RESET)).fetchall()]  # fmt: skip
        for pid in pids:
            if cpu := cpu_seconds(pid):  # 0: gone between the query and the read (or not started yet)
                into[pid] = cpu

    def _loop(self) -> None:
        with _pg(self._dsn) as conn:
            while not self._stop.wait(self._period):
                self._sample(conn, self._last)
            self._sample(conn, self._last)

    def __enter__(self) -> PgCpu:
        with _pg(self._dsn) as conn:
            self._sample(conn, self._base)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def seconds(self) -> float:
        return sum(cpu - self._base.get(pid, 0.0) for pid, cpu in self._last.items())


# -- SQLite -----------------------------------------------------------------------------------------------
@dataclass
class SqliteGrown:
    path: str
    last_job: str
    last_event: int
    finished: int
    folder: str

    def store(self) -> FreshStore:
        """A copy of the filled file per phase (SQLite's files are small enough to copy)."""
        folder = tempfile.mkdtemp(prefix="jobengine-growth-phase-", dir=os.path.dirname(self.folder))
        path = os.path.join(folder, "jobs.db")
        shutil.copyfile(self.path, path)
        os.sync()  # the copy's writeback must not compete with the phase's fsyncs
        return FreshStore(path, lambda: shutil.rmtree(folder, ignore_errors=True))


_SQLITE_ID = """substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || printf('%03x', g % 4096) || '-8'
    || printf('%03x', (g * 7919) % 4096) || '-' || printf('%012x', (g * 2654435761) % 281474976710656)"""


def sqlite_fill(finished: int, seed: int, logdir: str, cfg: BenchConfig, directory: str | None) -> SqliteGrown:
    folder = tempfile.mkdtemp(prefix="jobengine-growth-", dir=directory)
    path = os.path.join(folder, "jobs.db")
    started = time.perf_counter()
    say(f"fill: {seed:,} real jobs through the engine into {path}")
    _seed_run(cfg, logdir, seed, path)
    seeded = time.perf_counter()
    conn = sqlite3.connect(path, isolation_level=None)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1")]
    counts = {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
    say("fill: rows after the seed run: " + ", ".join(f"{t} {n:,}" for t, n in counts.items() if n))
    job_tables = [
        t for t in tables if t != "events" and any(c[1] == "job_id" for c in conn.execute(f'PRAGMA table_info("{t}")'))
    ]
    if others := [t for t in job_tables if counts.get(t)]:
        raise SystemExit(f"fill: a finished job left rows in {others}: replicate them too")
    columns = [c[1] for c in conn.execute("PRAGMA table_info(jobs)")]
    conn.execute("CREATE TEMP TABLE seed_jobs AS SELECT row_number() OVER (ORDER BY id) - 1 AS k, * FROM jobs")
    conn.execute(
        "CREATE TEMP TABLE seed_events AS SELECT s.k, e.id AS ord, e.at - s.created_at AS off, e.type, e.tenant,"
        " e.queue, e.task, e.data FROM events e JOIN seed_jobs s ON s.id = e.job_id"
    )
    conn.execute("CREATE INDEX temp.seed_events_k ON seed_events (k, ord)")
    conn.execute("CREATE INDEX temp.seed_jobs_k ON seed_jobs (k)")
    ecols = [c[1] for c in conn.execute("PRAGMA table_info(events)")]
    exprs = ["x.id" if c == "id" else (f"s.{c} + x.shift" if c in _TIMES else f"s.{c}") for c in columns]
    count = finished - seed
    t0 = time.time() - SPAN_DAYS * 86400 - 3600
    step = SPAN_DAYS * 86400 / max(1, count)
    # The filler jobs of one chunk with their seed job's columns, their new id (nid), created_at (at) and the
    # shift of their times, materialized in a temp table that the two inserts read.
    select_source = f"""WITH RECURSIVE gs(g) AS (SELECT :lo UNION ALL SELECT g + 1 FROM gs WHERE g < :hi),
        t AS (SELECT g, :t0 + g * :step AS at FROM gs),
        p AS (SELECT g, at, printf('%012x', CAST(at * 1000 AS INTEGER)) AS h FROM t)
        SELECT p.g, s.*, p.at, {_SQLITE_ID} AS nid, p.at - s.created_at AS shift
        FROM p JOIN seed_jobs s ON s.k = p.g % :seed"""
    for lo in range(0, count, CHUNK):
        params = {"lo": lo, "hi": min(count, lo + CHUNK) - 1, "seed": seed, "t0": t0, "step": step}
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DROP TABLE IF EXISTS temp.chunk")
        conn.execute(f"CREATE TEMP TABLE chunk AS {select_source}", params)
        conn.execute(
            f"INSERT INTO jobs ({', '.join(columns)}) SELECT "
            + ", ".join(e.replace("s.", "c.").replace("x.id", "c.nid").replace("x.shift", "c.shift") for e in exprs)
            + " FROM chunk c ORDER BY c.g"
        )
        names = [c for c in ecols if c != "id"]
        values = {"at": "c.at + e.off", "job_id": "c.nid"}
        conn.execute(
            f"INSERT INTO events ({', '.join(names)}) SELECT "
            + ", ".join(values.get(c, f"e.{c}") for c in names)
            + " FROM chunk c JOIN seed_events e ON e.k = c.k ORDER BY c.g, e.ord"
        )
        conn.execute("COMMIT")
        say(f"fill: {min(count, lo + CHUNK):,} / {count:,} replicated")
    replicated = time.perf_counter()
    conn.execute("ANALYZE")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    last_job = conn.execute("SELECT max(id) FROM jobs").fetchone()[0]
    last_event = conn.execute("SELECT max(id) FROM events").fetchone()[0]
    conn.close()
    done = time.perf_counter()
    say(
        f"fill: {finished:,} finished jobs in {done - started:,.0f} s (seed run {seeded - started:,.0f} s, "
        f"replication {replicated - seeded:,.0f} s, ANALYZE {done - replicated:,.0f} s); "
        f"file {os.path.getsize(path) / 2**20:,.0f} MiB"
    )
    return SqliteGrown(path, last_job, last_event, finished, folder)


# -- the runs ---------------------------------------------------------------------------------------------
def _seed_run(cfg: BenchConfig, logdir: str, seed: int, database: str) -> None:
    """``seed`` standard jobs enqueued and worked to the end on ``database`` (the process phase, unmeasured)."""
    seed_cfg = replace(cfg, n=seed, phases=("process",))
    ctx = Context(seed_cfg, logdir, fresh=lambda: FreshStore(database, lambda: None))
    asyncio.run(run_round(ctx, default_setting(), lambda m: None))


@dataclass
class Round:
    variant: str
    load: str
    measures: list[Measure] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # who -> CPU seconds


@contextmanager
def _cpu_meter(args: argparse.Namespace, databases: set[str]) -> Iterator[dict[str, float]]:
    out: dict[str, float] = {}
    self0, kids0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    meter = PgCpu(args.dsn, databases) if args.backend == "postgres" else None
    if meter is not None:
        meter.__enter__()
    try:
        yield out
    finally:
        if meter is not None:
            meter.__exit__()
            out["postgres"] = meter.seconds
        self1, kids1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        out["producer"] = self1.ru_utime + self1.ru_stime - self0.ru_utime - self0.ru_stime
        out["workers"] = kids1.ru_utime + kids1.ru_stime - kids0.ru_utime - kids0.ru_stime


def jobs_per_round(cfg: BenchConfig) -> int:
    n = 0
    for phase in cfg.phases:
        enqueued = {"enqueue-batch", "enqueue-single"} & set(cfg.phases)
        if phase in ("enqueue-batch", "enqueue-single") or (phase == "process" and not enqueued):
            n += cfg.n  # the process phase works the jobs an enqueue phase left, if one ran
        elif phase == "latency":
            n += cfg.warmup_jobs + round(cfg.rate * cfg.duration)
    return n


def run_all(args: argparse.Namespace, cfg: BenchConfig, grown_store: Callable[[], FreshStore],
            grown_db: str | None) -> list[Round]:  # fmt: skip
    rounds: list[Round] = []
    setting = default_setting()
    tag = os.urandom(4).hex()
    databases: set[str] = {grown_db} if grown_db else set()

    def empty_store() -> FreshStore:
        if args.backend != "postgres":
            return fresh_store(args.backend, None, args.tmpdir)
        name = f"growth_{tag}_{os.urandom(3).hex()}"
        databases.add(name)
        url = _pg_database(args.dsn, name)
        with _pg(args.dsn) as conn:
            conn.execute("CHECKPOINT")  # as after a grown store's reset: no writes owed as a phase starts
        return FreshStore(url, lambda: _pg_drop(args.dsn, name))

    with tempfile.TemporaryDirectory(prefix="jobengine-growth-logs-", dir=args.tmpdir) as logdir:
        for run in range(1, args.runs + 1):
            for variant, fresh in (("empty", empty_store), ("grown", grown_store)):
                r = Round(variant, load())
                ctx = Context(cfg, logdir, None, run, fresh=fresh)

                def report(m: Measure, r: Round = r, run: int = run) -> None:
                    r.measures.append(m)
                    value = "-" if math.isnan(m.value) else f"{m.value:,.2f}"
                    say(f"run {run}/{args.runs} {r.variant}: {m.phase} {m.metric} = {value} {m.unit}")

                with _cpu_meter(args, databases) as cpu:
                    asyncio.run(run_round(ctx, setting, report))
                r.cpu = cpu
                jobs = jobs_per_round(cfg)
                per = ", ".join(f"{who} {1000 * s / jobs:.3f}" for who, s in cpu.items())
                say(f"run {run}/{args.runs} {variant}: CPU s per 1,000 jobs {per} (load {r.load} -> {load()})")
                rounds.append(r)
    return rounds


def _median(values: list[float]) -> str:
    good = [v for v in values if not math.isnan(v)]
    if not good:
        return "-"
    med = statistics.median(good)
    spread = f" ({min(good):,.4g}-{max(good):,.4g})" if len(good) > 1 else ""
    return f"{med:,.4g}{spread}"


def render(rounds: list[Round], cfg: BenchConfig, finished: int, title: str) -> None:
    keys: list[tuple[str, str, str]] = []
    values: dict[tuple[str, str, str, str], list[float]] = {}
    for r in rounds:
        for m in r.measures:
            key = (m.phase, m.metric, m.unit)
            if key not in keys:
                keys.append(key)
            values.setdefault((r.variant, *key), []).append(m.value)
    jobs = jobs_per_round(cfg)
    for who in ("producer", "workers", "postgres"):
        key = ("CPU per round", f"{who} CPU s / 1,000 jobs", "s")
        for r in rounds:
            if who in r.cpu:
                if key not in keys:
                    keys.append(key)
                values.setdefault((r.variant, *key), []).append(1000 * r.cpu[who] / jobs)
    print(title)
    header = f"{'phase':<16} {'measure':<34} {'empty':>26} {f'{finished:,} finished':>26} {'grown/empty':>11}"
    print(header)
    print("-" * len(header))
    for key in keys:
        e, g = values.get(("empty", *key), []), values.get(("grown", *key), [])
        ge, gg = [v for v in e if not math.isnan(v)], [v for v in g if not math.isnan(v)]
        ratio = f"{statistics.median(gg) / statistics.median(ge):.2f}" if ge and gg and statistics.median(ge) else "-"
        print(f"{key[0]:<16} {key[1] + ' ' + key[2]:<34} {_median(e):>26} {_median(g):>26} {ratio:>11}")
    print("loads at the start of each round: " + ", ".join(f"{r.variant} {r.load}" for r in rounds))
    print(f"workers: {default_setting().label} (the product's defaults); phases as bench/README.md; "
          f"CPU per round over {jobs:,} jobs (enqueued + latency jobs)")  # fmt: skip


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.growth", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # fmt: skip
    p.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    p.add_argument("--dsn", help="postgresql://user@127.0.0.1/db: the server (--backend postgres)")
    p.add_argument("--finished", type=int, default=1_000_000, help="finished jobs in the grown store")
    p.add_argument("--seed", type=int, default=2000, help="real jobs run to completion, then replicated")
    p.add_argument("--grown", help="reuse a kept grown store (a database name, or a SQLite file): no fill")
    p.add_argument("--keep", action="store_true", help="keep the grown store after the runs (a --grown one always is)")
    p.add_argument("--fill-only", action="store_true", help="fill (and keep) the grown store, run nothing")
    p.add_argument("-n", type=int, default=20_000, help="jobs in the enqueue and process phases")
    p.add_argument("--runs", type=int, default=3, help="runs of each store, interleaved")
    p.add_argument("--phases", default=",".join(PHASES))
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--tmpdir")
    a = p.parse_args(argv)
    if a.backend == "postgres" and not a.dsn:
        p.error("--backend postgres needs --dsn")
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # SIGTERM unwinds like Ctrl-C, so workers stop and the stores made for the phases are dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    phases = tuple(x.strip() for x in args.phases.split(",") if x.strip())
    cfg = BenchConfig(
        backend=args.backend, dsn=args.dsn, n=args.n, runs=args.runs, chunk=1000, phases=phases,
        settings=(default_setting(),), rate=args.rate, duration=args.duration, warmup_jobs=20,
        idle_after_warmup=1.0, synchronous="FULL", ceiling_commits=0, ceilings=False, tmpdir=args.tmpdir,
        timeout=args.timeout, profile_dir=None,
    )  # fmt: skip
    # A store given with --grown is the caller's: kept, as its SQLite file is.
    keep = args.keep or args.fill_only or bool(args.grown)
    pg: PgGrown | None = None
    lite: SqliteGrown | None = None
    with tempfile.TemporaryDirectory(prefix="jobengine-growth-fill-", dir=args.tmpdir) as logdir:
        if args.backend == "postgres":
            pg = (
                pg_reuse(args.dsn, args.grown)
                if args.grown
                else pg_fill(args.dsn, args.finished, args.seed, logdir, cfg)
            )
            grown_store, grown_db, finished = pg.store, pg.name, pg.finished
        else:
            if args.grown:
                conn = sqlite3.connect(args.grown)
                last_job, last_event = conn.execute("SELECT max(id) FROM jobs").fetchone()[0], 0
                finished = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
                conn.close()
                lite = SqliteGrown(args.grown, last_job, last_event, finished, os.path.dirname(args.grown))
            else:
                lite = sqlite_fill(args.finished, args.seed, logdir, cfg, args.tmpdir)
            grown_store, grown_db, finished = lite.store, None, lite.finished
    try:
        if args.fill_only:
            return 0
        started = time.time()
        rounds = run_all(args, cfg, grown_store, grown_db)
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(started))
        title = (
            f"jobengine growth - {args.backend}, N={cfg.n:,}, {args.runs} runs interleaved (empty, grown), "
            f"{when} UTC, {time.time() - started:,.0f} s"
        )
        render(rounds, cfg, finished, title)
    finally:
        if pg is not None:
            if keep:
                say(f"kept the grown store: --grown {pg.name}")
            else:
                _pg_drop(args.dsn, pg.name)
        if lite is not None and not args.grown:
            if keep:
                say(f"kept the grown store: --grown {lite.path}")
            else:
                shutil.rmtree(lite.folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
