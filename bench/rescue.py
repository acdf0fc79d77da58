"""How soon a SIGKILLed worker's jobs run again: ``python -m bench.rescue``.

Two ``jobengine worker`` processes at their defaults run jobs of 20 ms (``--jobs`` of them, enqueued at an
even rate over ``--seconds``, so that work is in flight all along); every ``--every`` seconds one of them is
SIGKILLed (in turn) and started again. Each execution writes ``start``/``end`` lines with its pid and time
to a ledger file (one O_APPEND write each). Afterwards, per killed worker, the jobs it had started and not
ended are *interrupted*; the table gives how long after the kill each one started again (median, max), and
checks what must hold: every job succeeded (0 lost), none is left queued or running (0 stuck), and no job
ran in two live workers at once (an execution that began while another, on a worker not yet killed, had
not ended).

Usage (from the project root)::

    .venv/bin/python -m bench.rescue                                   # SQLite, every 1.5 s for 20 s
    .venv/bin/python -m bench.rescue --backend postgres --dsn postgresql://postgres@127.0.0.1/postgres
    .venv/bin/python -m bench.rescue --backend postgres --dsn ... --transport redis   # or nats
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.stores import fresh_store
from bench.transports import TRANSPORTS, fresh_queue
from jobengine.core.queue_config import QueueConfig
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.worker import JobContext

_ROOT = Path(__file__).resolve().parent.parent


def _record(*parts: object) -> None:
    fd = os.open(os.environ["RESCUE_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (" ".join(str(p) for p in parts) + "\n").encode())
    finally:
        os.close(fd)


def _settings() -> Settings:
    queue = os.environ.get("RESCUE_QUEUE")
    settings = Settings.load()
    if queue:
        from dataclasses import replace

        settings = replace(settings, queue=QueueConfig.load(json.loads(queue)))
    return settings


def app() -> Engine:
    """The workers' app: ``bench_rescue`` sleeps 20 ms between its two ledger lines."""
    engine = Engine.from_settings(_settings())

    @engine.task(max_attempts=50)
    async def bench_rescue(ctx: JobContext) -> None:
        _record("start", ctx.job_id, os.getpid(), time.time())
        await asyncio.sleep(0.02)
        _record("end", ctx.job_id, os.getpid(), time.time())

    return engine


_LOGS: dict[int, Path] = {}


def _ready(logs: Path, p: subprocess.Popen[bytes]) -> bool:
    return "started on queues" in _LOGS[p.pid].read_text(errors="replace")


def _worker(env: dict[str, str], logs: Path, n: int) -> subprocess.Popen[bytes]:
    with open(logs / f"worker{n}.log", "wb") as out:
        p = subprocess.Popen(
            [sys.executable, "-m", "jobengine", "worker", "--app", "bench.rescue:app"],
            env=env, cwd=_ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    _LOGS[p.pid] = logs / f"worker{n}.log"
    return p


def one_run(backend: str, dsn: str | None, transport: str, args: argparse.Namespace) -> dict[str, Any]:
    store = fresh_store(backend, dsn, None)
    queue = fresh_queue(transport, None)
    try:
        return asyncio.run(_churn(store.database, queue.settings, args))
    finally:
        store.cleanup()
        queue.cleanup()


async def _churn(database: str, queue: str | None, args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="jobengine-rescue-"))
    ledger = work / "ledger.txt"
    env = {**os.environ, "PYTHONPATH": str(_ROOT), "JOBENGINE_DATABASE": database, "RESCUE_LEDGER": str(ledger)}
    if queue:
        env["RESCUE_QUEUE"] = queue
    os.environ.update({k: env[k] for k in ("JOBENGINE_DATABASE", "RESCUE_LEDGER")})
    if queue:
        os.environ["RESCUE_QUEUE"] = queue
    producer = app()
    kills: dict[int, float] = {}
    async with producer:
        workers = [_worker(env, work, n) for n in range(2)]
        started = time.time()
        spacing = args.seconds / args.jobs
        next_kill = started + args.every
        n = 0
        victim = 0
        while n < args.jobs:
            now = time.time()
            due = min(args.jobs, int((now - started) / spacing) + 1)
            if due > n:
                await producer.enqueue_many([producer.new_job("bench_rescue", {"i": i}) for i in range(n, due)])
                n = due
            if now >= next_kill:
                next_kill += args.every
                # The other worker, once it runs (a kill before its start would interrupt nothing).
                p = workers[victim]
                if _ready(work, p):
                    p.send_signal(signal.SIGKILL)
                    kills[p.pid] = time.time()
                    p.wait()
                    workers[victim] = _worker(env, work, len(kills) + 2)
                    victim = 1 - victim
            await asyncio.sleep(0.005)
        deadline = time.time() + 120
        counts: dict[JobState, int] = {}
        while time.time() < deadline:
            counts = defaultdict(int)
            for (_, state), k in (await producer.count_jobs()).items():
                counts[state] += k
            if counts.get(JobState.SUCCEEDED, 0) == args.jobs:
                break
            await asyncio.sleep(0.2)
        for p in workers:
            p.send_signal(signal.SIGTERM)
        for p in workers:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
    return _analyse(ledger, kills, counts, args.jobs)


def _analyse(ledger: Path, kills: dict[int, float], counts: dict[JobState, int], jobs: int) -> dict[str, Any]:
    runs: dict[str, list[tuple[int, float, float | None]]] = defaultdict(list)  # job -> (pid, start, end)
    open_runs: dict[tuple[str, int], int] = {}
    for line in ledger.read_text().splitlines():
        kind, job, pid_text, at_text = line.split()
        pid, at = int(pid_text), float(at_text)
        if kind == "start":
            open_runs[(job, pid)] = len(runs[job])
            runs[job].append((pid, at, None))
        elif (job, pid) in open_runs:
            k = open_runs.pop((job, pid))
            runs[job][k] = (pid, runs[job][k][1], at)
    delays: list[float] = []
    overlaps = 0
    for executions in runs.values():
        for k, (pid, _began, ended) in enumerate(executions):
            if ended is None and pid in kills:
                later = [b for _, b, _ in executions[k + 1 :] if b >= kills[pid]]
                if later:
                    delays.append(min(later) - kills[pid])
            for other_pid, other_began, _ in executions[k + 1 :]:
                # A later execution began while this one's worker was alive and had not finished it.
                alive_until = ended if ended is not None else kills.get(pid, float("inf"))
                if other_pid != pid and other_began < alive_until:
                    overlaps += 1
    lost = jobs - counts.get(JobState.SUCCEEDED, 0)
    stuck = counts.get(JobState.RUNNING, 0) + counts.get(JobState.QUEUED, 0)
    return {"kills": len(kills), "interrupted": len(delays), "delays": delays, "lost": lost, "stuck": stuck,
            "overlaps": overlaps}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rescue", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--dsn", help="PostgreSQL: a database to make fresh ones beside")
    parser.add_argument("--transport", choices=TRANSPORTS, default="database")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0, help="enqueue and kill for this long")
    parser.add_argument("--every", type=float, default=1.5, help="seconds between kills")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    rows = []
    for _ in range(args.runs):
        result = one_run(args.backend, args.dsn, args.transport, args)
        delays = sorted(result["delays"])
        rows.append((result, delays))
        print(json.dumps({k: v for k, v in result.items() if k != "delays"}), file=sys.stderr)
    print(f"\nrescue after SIGKILL: {args.backend} / {args.transport}, 2 workers at their defaults, "
          f"{args.jobs} jobs of 20 ms over {args.seconds:g} s, a kill every {args.every:g} s")  # fmt: skip
    print("| run | kills | interrupted jobs | restart after kill: median s | max s | lost | stuck | overlaps |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for k, (result, delays) in enumerate(rows, 1):
        median = f"{statistics.median(delays):.2f}" if delays else "-"
        worst = f"{max(delays):.2f}" if delays else "-"
        print(f"| {k} | {result['kills']} | {result['interrupted']} | {median} | {worst} | {result['lost']} | "
              f"{result['stuck']} | {result['overlaps']} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
