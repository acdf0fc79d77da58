"""Throughput by number of worker hosts on the network test bed: ``python -m bench.hosts`` (as root).

The bed is tests/support/netbed.py's: network namespaces on one bridge, a database host running a
PostgreSQL cluster of its own, an API host, and worker hosts ``worker1`` .. ``worker3``. Every process is
started with the command and settings of the deploy files (deploy/systemd, deploy/jobengine.env), so each
worker host runs one ``jobengine worker`` at the product's defaults.

One measure, for each job variant (``--sleep-ms``) and each number of worker hosts (``--hosts``):

1. a fresh database on the bed's cluster (migrated, untimed); the API host's ``jobengine serve`` on it;
2. ``--jobs`` (20,000) standard jobs (bench/workload.py, ``bench/README.md``) enqueued through the API
   host's batch endpoint, 1,000 per call (reported: jobs/s); the API host is stopped;
3. the worker hosts' ``jobengine worker`` launched at once; timed until all N distinct jobs reported to the
   benchmark's collector and the store counts none active: **launch -> drained** (N / that time, start-up
   included) and **steady** (N / first -> last job start), as the standard workload's process phase.

The runs are interleaved (1, 2, 3 hosts, then again; ``--runs`` 3) and the table gives each median with
its spread. Beside the rates: the machine's CPU busy share during the measure and the CPU seconds the
workers and PostgreSQL spent per job, because the "hosts" share the machine's cores: a rate grows with
hosts only while there is idle CPU, which the CPU-bound job (sleep 0) soon exhausts. The I/O-bound variant
(each job waits ``--sleep-ms`` after reporting) shows the growth a fleet gets when jobs wait on other
services; its ceiling is hosts x ``worker_concurrency`` (10) / sleep.

The bed's PostgreSQL runs without fsync (the bed's own settings): the figures are about the fleet, not
the disk. A dated result file is written (``--result``, default ``bench/results/<UTC date>-hosts.md``).
Usage (from the project root, as root)::

    .venv/bin/python -m bench.hosts                                  # 20,000 jobs, sleep 0 and 20 ms, 3 runs
    .venv/bin/python -m bench.hosts --jobs 200 --runs 1 --result /tmp/hosts.md   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))  # the bed and the deploy files' reader live with the tests

from bench.collector import Collector  # noqa: E402
from bench.phases import active_jobs  # noqa: E402
from bench.postgres import fresh_database  # noqa: E402
from bench.workload import TASK  # noqa: E402
from jobengine.engine import Engine  # noqa: E402
from jobengine.settings import Settings  # noqa: E402
from support.deploy import DeployFiles  # noqa: E402
from support.netbed import NetBed, bed_postgres, netbed  # noqa: E402
from support.processes import Processes  # noqa: E402

APP = "bench.hosts_app:app"
CHUNK = 1_000  # the batch endpoint's limit
CLOCK = os.sysconf("SC_CLK_TCK")


def _refuse(reason: str) -> NoReturn:
    raise SystemExit(f"python -m bench.hosts: {reason}")


@dataclass(frozen=True)
class Sample:
    sleep_ms: float
    hosts: int
    enqueue: float  # jobs/s through the API host
    drained: float  # jobs/s, launch -> drained (NaN when it did not finish)
    steady: float  # jobs/s, first -> last job start
    busy: float  # share of the machine's CPU time busy during the measure, 0..1
    bed_share: float  # share of the machine's CPU time the workers and PostgreSQL used, 0..1
    worker_cpu: float  # CPU seconds of the worker processes per job
    postgres_cpu: float  # CPU seconds of the bed's PostgreSQL per job
    checks: tuple[str, ...]  # what went wrong, if anything


# -- CPU accounting from /proc ---------------------------------------------------------------------------
def _machine_cpu() -> tuple[int, int]:
    """(busy, total) clock ticks of all cores since boot."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return sum(ticks) - idle, sum(ticks)


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (index 0 is the state); None once it exited."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()
    except OSError:
        return None


def _cpu_seconds(pid: int, reaped_children: bool = False) -> float:
    fields = _stat(pid)
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if reaped_children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime: the children it has waited for
    return ticks / CLOCK


def _postmaster(bed: NetBed) -> int:
    """The pid of the bed's postmaster: the process whose command line names the cluster's directory
    (``bed_postgres`` makes it under a name starting with the bed's tag; backends rewrite theirs)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"/postgres") and any(f"/{bed.tag}-pg-".encode() in a for a in argv):
            return int(entry)
    raise RuntimeError("the bed's postmaster was not found")


def _postgres_cpu(postmaster: int) -> float:
    """CPU seconds of the cluster so far: the postmaster, the backends it has reaped, the ones alive."""
    total = _cpu_seconds(postmaster, reaped_children=True)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None and fields[1] == str(postmaster):
                total += _cpu_seconds(int(entry))
    return total


# -- one measure ---------------------------------------------------------------------------------------
def _stop(p: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """SIGINT (jobengine's graceful stop), then SIGKILL if it has not exited within ``timeout``."""
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _enqueue(api: str, key: str, n: int, sleep: float) -> float:
    """``n`` standard jobs through the API host's batch endpoint; jobs/s."""
    started = time.perf_counter()
    for first in range(0, n, CHUNK):
        t = time.time()
        jobs = [
            {"task": TASK, "payload": {"i": i, "t": t, **({"sleep": sleep} if sleep else {})}}
            for i in range(first, min(first + CHUNK, n))
        ]
        request = urllib.request.Request(
            f"{api}/api/v1/jobs/batch", data=json.dumps({"jobs": jobs}).encode(), method="POST",
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=120) as answer:
            assert answer.status == 201, answer.read()
    return n / (time.perf_counter() - started)


async def _drained(engine: Engine, deadline: float) -> bool:
    """Poll the store until nothing is active (True) or ``deadline`` (``perf_counter``) passed (False)."""
    while time.perf_counter() < deadline:
        if await active_jobs(engine) == 0:
            return True
        await asyncio.sleep(0.005)
    return False


@dataclass(frozen=True)
class Bed:
    bed: NetBed
    dsn: str  # the bed's cluster, to make fresh databases beside
    files: DeployFiles
    tmp: Path
    workers: tuple[str, ...]


async def _measure(bed: Bed, n: int, sleep_ms: float, hosts: int, timeout: float, tag: str) -> Sample:
    url, drop = fresh_database(bed.dsn)
    logs = bed.tmp / tag
    logs.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBENGINE_")}
    env |= bed.files.environment | {
        "PYTHONPATH": str(ROOT),
        "JOBENGINE_APP": APP,
        "JOBENGINE_DATABASE": url,
        "JOBENGINE_API_HOST": bed.bed.address("api"),
    }
    procs = Processes(logs, env, ROOT)

    def start(host: str, role: str, extra: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "jobengine", *bed.files.command(role, env)]
        state = {"JOBENGINE_STATE_DIR": str(logs / host)}
        return procs.run(f"{host}-{role}", bed.bed.argv(host, argv), state | (extra or {}))

    checks: list[str] = []
    try:
        # The benchmark's engine migrates the fresh database as it opens; the key lets the API listen
        # beyond loopback.
        async with Engine.from_settings(Settings(database=url)) as engine:
            _, key = await engine.keys.create("default", ["admin"], name="bench-hosts")
            api = start("api", "api")
            procs.wait_output(api, "jobengine serve", 120)
            enqueued = await asyncio.to_thread(
                _enqueue, f"http://{bed.bed.address('api')}:8080", key, n, sleep_ms / 1000
            )
            _stop(api)
            postmaster = _postmaster(bed.bed)
            with Collector() as collector:
                machine0, pg0 = _machine_cpu(), _postgres_cpu(postmaster)
                began = time.perf_counter()
                workers = [
                    start(host, "worker", {"HOSTS_BENCH_SOCKET": collector.path}) for host in bed.workers[:hosts]
                ]
                try:
                    arrived = False
                    deadline = began + timeout
                    while not arrived and time.perf_counter() < deadline:
                        arrived = await asyncio.to_thread(collector.wait_for, n, 1.0)
                        for p in workers:
                            if p.poll() is not None:
                                raise RuntimeError(f"a worker exited {p.returncode}:\n{procs.output(p)}")
                    drained = arrived and await _drained(engine, deadline)
                    elapsed = time.perf_counter() - began
                    machine1, pg1 = _machine_cpu(), _postgres_cpu(postmaster)
                    worker_cpu = sum(_cpu_seconds(p.pid) for p in workers)
                finally:
                    for p in workers:
                        _stop(p)
                snap = collector.snapshot()
            if not drained:
                checks.append(f"TIMEOUT: {snap.distinct:,}/{n:,} ran in {timeout:g}s")
            if snap.duplicates:
                checks.append(f"{snap.duplicates} duplicates")
    finally:
        procs.stop_all()
        await asyncio.to_thread(drop)
    steady = math.nan
    if snap.first_start is not None and snap.last_start is not None and snap.last_start > snap.first_start:
        steady = snap.distinct / (snap.last_start - snap.first_start)
    return Sample(
        sleep_ms=sleep_ms, hosts=hosts, enqueue=enqueued, drained=n / elapsed if drained else math.nan,
        steady=steady, busy=(machine1[0] - machine0[0]) / max(1, machine1[1] - machine0[1]),
        bed_share=(worker_cpu + pg1 - pg0) / (elapsed * (os.cpu_count() or 1)),
        worker_cpu=worker_cpu / n, postgres_cpu=(pg1 - pg0) / n, checks=tuple(checks),
    )  # fmt: skip


# -- the table -----------------------------------------------------------------------------------------
def _cell(values: list[float], scale: float = 1.0, fmt: str = ",.0f") -> str:
    good = [v * scale for v in values if not math.isnan(v)]
    if not good:
        return "-"
    median = format(statistics.median(good), fmt)
    return median if len(good) == 1 else f"{median} ({format(min(good), fmt)} - {format(max(good), fmt)})"


def _variant(sleep_ms: float) -> str:
    return "CPU-bound (no sleep)" if not sleep_ms else f"I/O-bound (sleep {sleep_ms:g} ms)"


def table(samples: list[Sample], concurrency: int) -> list[str]:
    """The markdown table (median (min - max) over the runs) and, per job variant, what limits growth."""
    lines = [
        "| job | worker hosts | launch -> drained jobs/s | steady jobs/s | x 1 host (drained) | CPU busy % "
        "| workers + PostgreSQL CPU % "
        "| worker CPU ms/job | PostgreSQL CPU ms/job | enqueue jobs/s (API host) | checks |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    notes = []
    for sleep_ms in sorted({s.sleep_ms for s in samples}):
        rows = [s for s in samples if s.sleep_ms == sleep_ms]
        counts = sorted({s.hosts for s in rows})
        base = statistics.median([s.drained for s in rows if s.hosts == counts[0]] or [math.nan])
        for hosts in counts:
            mine = [s for s in rows if s.hosts == hosts]
            drained = [s.drained for s in mine]
            good = [d for d in drained if not math.isnan(d)]
            ratio = f"{statistics.median(good) / base:.2f}" if good and base and not math.isnan(base) else "-"
            checks = "; ".join(c for s in mine for c in s.checks) or "ok"
            lines.append(
                f"| {_variant(sleep_ms)} | {hosts} | {_cell(drained)} | {_cell([s.steady for s in mine])} | {ratio} "
                f"| {_cell([s.busy for s in mine], 100)} | {_cell([s.bed_share for s in mine], 100)} "
                f"| {_cell([s.worker_cpu for s in mine], 1000, '.2f')} "
                f"| {_cell([s.postgres_cpu for s in mine], 1000, '.2f')} | {_cell([s.enqueue for s in mine])} "
                f"| {checks} |"
            )
        notes.append(_limit(sleep_ms, rows, counts, concurrency))
    return [*lines, "", *notes]


def _limit(sleep_ms: float, rows: list[Sample], counts: list[int], concurrency: int) -> str:
    """One sentence naming what bounds the largest fleet's rate, from the run's own figures."""

    def median(hosts: int, measure: Callable[[Sample], float]) -> float:
        return statistics.median([measure(s) for s in rows if s.hosts == hosts] or [math.nan])

    most, fewest = counts[-1], counts[0]
    busy, share = median(most, lambda s: s.busy), median(most, lambda s: s.bed_share)
    steady = median(most, lambda s: s.steady)
    cores = os.cpu_count() or 1
    head = f"- {_variant(sleep_ms)}, {most} worker host(s): "
    if sleep_ms:
        cap = most * concurrency * 1000 / sleep_ms
        if steady >= 0.8 * cap:
            return head + (
                f"the sleep bounds it: {most} x {concurrency} slots / {sleep_ms:g} ms = {cap:,.0f} jobs/s, "
                f"steady {steady:,.0f}; the CPU was {busy:.0%} busy."
            )
        bound = f"below its slot ceiling of {cap:,.0f} jobs/s (steady {steady:,.0f})"
    else:
        bound = f"no sleep, each job costs CPU only (steady {steady:,.0f} jobs/s)"
    if busy < 0.85:
        return head + (
            f"{bound}, with the CPU {busy:.0%} busy: the waits of each job's database round trips (claim, "
            "complete) bound it, which more slots or hosts spread."
        )
    if share >= 0.6 * busy:
        return head + (
            f"{bound}; the CPU bounds it: the {cores} cores were {busy:.0%} busy, {share:.0%} of them the workers "
            "and PostgreSQL, and every host shares them: another host adds processes, not cores."
        )
    return head + (
        f"{bound}; the {cores} cores were {busy:.0%} busy but the workers and PostgreSQL had {share:.0%} of them "
        f"({median(fewest, lambda s: s.bed_share):.0%} with {fewest} host(s)): the rest is other work on the "
        "machine, and every step of a job (a worker's or a PostgreSQL backend's turn) waits in line for a core. "
        "More hosts put more processes in that line and so get more of the cores: the growth here is a larger "
        "share of a shared machine, not spare capacity."
    )


# -- the run -------------------------------------------------------------------------------------------
def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _machine() -> str:
    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model}"


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    changed = git("status", "--porcelain", "--untracked-files=no")  # a result file of an earlier run is no change
    return git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if changed else "")


def _result_path(asked: str | None) -> Path | None:
    if asked == "":
        return None
    if asked:
        return Path(asked)
    day = datetime.datetime.now(datetime.UTC).date().isoformat()
    path = ROOT / "bench" / "results" / f"{day}-hosts.md"
    number = 2
    while path.exists():  # a committed result is never overwritten
        path = path.with_name(f"{day}-hosts-{number}.md")
        number += 1
    return path


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.hosts", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per measure (default 20,000)")
    parser.add_argument("--runs", type=int, default=3, help="interleaved runs of every measure (default 3)")
    parser.add_argument("--hosts", default="1,2,3", help="numbers of worker hosts, at most 3 (default 1,2,3)")
    parser.add_argument(
        "--sleep-ms", default="0,20", help="job variants: ms each job waits after reporting (default 0,20)"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one measure may take")
    parser.add_argument(
        "--result", help="the result file (default bench/results/<UTC date>-hosts.md, never overwritten; '' for none)"
    )
    args = parser.parse_args(argv)
    args.host_counts = sorted({int(h) for h in args.hosts.split(",") if h})
    args.sleeps = sorted({float(s) for s in args.sleep_ms.split(",") if s})
    if not args.host_counts or not set(args.host_counts) <= {1, 2, 3}:
        parser.error("--hosts: numbers from 1 to 3")
    return args


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if os.geteuid() != 0:
        print("python -m bench.hosts needs root: the bed makes network namespaces (ip netns)", file=sys.stderr)
        return 2
    # A stop signal ends the run through its cleanup (the namespaces, the cluster), even when a start in the
    # background left SIGINT ignored.
    signal.signal(signal.SIGINT, _interrupted)
    signal.signal(signal.SIGTERM, _interrupted)
    files = DeployFiles.read()
    concurrency = int(files.environment.get("JOBENGINE_WORKER_CONCURRENCY", Settings().worker_concurrency))
    workers = tuple(f"worker{i}" for i in range(1, max(args.host_counts) + 1))
    load_before, began, commit = _load(), datetime.datetime.now(datetime.UTC), _commit()
    samples: list[Sample] = []
    with (
        tempfile.TemporaryDirectory(prefix="jobengine-bench-hosts-") as tmp,
        netbed(["db", "api", *workers], unavailable=_refuse) as nb,
        bed_postgres(nb, "db", unavailable=_refuse) as dsn,
    ):
        bed = Bed(nb, dsn, files, Path(tmp), workers)
        for run in range(args.runs):
            # Interleaved: a drift of the machine's load hits every measure alike.
            for sleep_ms in args.sleeps:
                for hosts in args.host_counts:
                    tag = f"run{run + 1}-sleep{sleep_ms:g}-hosts{hosts}"
                    sample = asyncio.run(_measure(bed, args.jobs, sleep_ms, hosts, args.timeout, tag))
                    samples.append(sample)
                    print(json.dumps({"run": run + 1, **sample.__dict__}), file=sys.stderr)
    load_after = _load()
    command = " ".join(["python -m bench.hosts", *(argv if argv is not None else sys.argv[1:])])
    head = [
        f"worker hosts on the network test bed: {args.jobs:,} standard jobs per measure, {args.runs} run(s), "
        f"median (min - max); each worker host runs one `jobengine worker` at the deploy files' defaults "
        f"(worker_concurrency {concurrency}); the bed's PostgreSQL runs without fsync; worker CPU includes each "
        "worker's start-up",
        f"machine: {_machine()}; load average (1, 5, 15 min) {load_before} before, {load_after} after; "
        "the worker hosts are network namespaces of this one machine and share its cores",
    ]
    body = table(samples, concurrency)
    print("\n".join([*head, "", *body]))
    path = _result_path(args.result)
    if path is not None:
        text = [
            "# Throughput by number of worker hosts on the network test bed",
            "",
            f"- **Recorded**: {began:%Y-%m-%d %H:%M} UTC, at commit {commit}.",
            f"- **Machine**: {_machine()}; load average (1, 5, 15 min) {load_before} before the run, "
            f"{load_after} after.",
            f"- **Command**: `{command}` (as root, from the project root).",
            "",
            "```",
            *head,
            "```",
            "",
            *body,
            "",
        ]
        path.write_text("\n".join(text))
        print(f"\nwritten: {path}", file=sys.stderr)
    return 1 if any(s.checks for s in samples) else 0


if __name__ == "__main__":
    raise SystemExit(main())
