"""``python -m bench.compare --dsn postgresql://postgres@127.0.0.1/postgres``: jobengine on PostgreSQL against
PgQueuer and Procrastinate, the standard workload of ``bench/README.md``, on the same server, one table.

- A separate virtual environment (``--venv``, default ``/tmp/jobengine-compare-venv``, never committed)
  gets ``pgqueuer`` and ``procrastinate`` from PyPI, plus this checkout (the drivers share the benchmark's
  collector and phase loops), the first time.
- Every run runs every system once, interleaved (jobengine, PgQueuer, Procrastinate, jobengine, ...); each
  system's phases run in a process of their own on fresh databases. Each system runs at each of its worker
  settings (``--jobengine``, ``--pgqueuer``, ``--procrastinate``: comma lists). jobengine runs first at
  ``defaults`` (what ``jobengine worker`` does with no flags: the product's settings, not the benchmark's),
  then at its tuned settings; the table has a column for each, every other system at its best setting, and
  two ratios per measure: jobengine's defaults, then its best tuned setting, against the faster other system.
- The machine's ceilings are measured in every run: ``pgbench -b simple-update -c 2 -j 2`` (commits/s)
  and, when ``redis-benchmark`` exists, ``redis-benchmark -q -n 100000 -t set,lpush,rpop``.

``--dsn`` must be allowed to create databases (the phases create and drop their own).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench import postgres

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["pgqueuer", "procrastinate", "asyncpg", "psycopg[binary]"]


def ensure_venv(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv} with {', '.join(PACKAGES)} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    check = "import pgqueuer, procrastinate, asyncpg, psycopg, jobengine"
    if subprocess.run([str(python), "-c", check], capture_output=True).returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PACKAGES, "-e", str(ROOT)], check=True)
    return python


def versions(python: Path) -> str:
    code = (
        "import importlib.metadata as m; "
        "print(', '.join(f'{p} {m.version(p)}' for p in ('pgqueuer', 'procrastinate', 'asyncpg', 'psycopg')))"
    )
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


#: The ``--jobengine`` setting that runs the worker as ``jobengine worker`` runs with no flags.
DEFAULTS = "defaults"
#: The table's columns: jobengine at its defaults, jobengine tuned, then the other systems.
SYSTEMS = ["jobengine defaults", "jobengine", "pgqueuer", "procrastinate"]


def worker_flags(setting: str) -> list[str]:
    """``--concurrency``/``--fetch-batch``/``--prefetch`` for the benchmark; for ``defaults``, the product's
    values (the benchmark's own defaults are tuned ones), its log level included: its job lines."""
    if setting == DEFAULTS:
        from jobengine.settings import Settings

        d = Settings()
        return ["--concurrency", str(d.worker_concurrency), "--fetch-batch", str(d.fetch_batch),
                "--worker-log-level", d.log_level]  # fmt: skip
    concurrency, _, batch = setting.partition("/")
    return ["--concurrency", concurrency, "--fetch-batch", batch or "0"]


def run_jobengine(args: argparse.Namespace, setting: str, out: Path, phases: str) -> None:
    cmd = [sys.executable, "-m", "bench", "--backend", "postgres", "--dsn", args.dsn, "--runs", "1",
           "--phases", phases,
           "--no-ceilings", "-n", str(args.n), "--duration", str(args.duration), "--rate", str(args.rate),
           *worker_flags(setting), "--json", str(out)]  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def run_other(
    args: argparse.Namespace, python: Path, system: str, setting: str, out: Path, logdir: str, phases: str
) -> None:
    cmd = [str(python), "-m", "bench.compare.driver", "phases", system, "--dsn", args.dsn, "--setting", setting,
           "--phases", phases,
           "-n", str(args.n), "--duration", str(args.duration), "--rate", str(args.rate), "--json", str(out),
           "--logdir", logdir]  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _by_system(plan: list[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
    grouped: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for system, setting in plan:
        grouped[system].append((system, setting))
    return grouped


def redis_ceiling() -> str | None:
    if shutil.which("redis-benchmark") is None:
        return None
    done = subprocess.run(
        ["redis-benchmark", "-q", "-n", "100000", "-t", "set,lpush,rpop"], capture_output=True, text=True
    )
    lines = [ln.split("\r")[-1].strip() for ln in done.stdout.splitlines() if "requests per second" in ln]
    return "; ".join(lines) or None


def load(path: Path, system: str) -> list[dict[str, object]]:
    raw = json.loads(path.read_text())
    measures = raw["measures"] if isinstance(raw, dict) else raw
    return [{**m, "system": system} for m in measures]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", required=True, help="an admin DSN of the PostgreSQL server to use")
    p.add_argument("--venv", type=Path, default=Path("/tmp/jobengine-compare-venv"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("-n", type=int, default=20_000)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument(
        "--jobengine", default=f"{DEFAULTS},300/0", help=f"`{DEFAULTS}` or concurrency/fetch-batch per process (list)"
    )
    p.add_argument("--pgqueuer", default="16,64", help="dequeue batch sizes (list)")
    p.add_argument("--procrastinate", default="50", help="per-process concurrency (list; empty: left out)")
    p.add_argument("--json", type=Path, help="also write every measure here")
    args = p.parse_args(argv)

    python = ensure_venv(args.venv)
    # An empty list leaves a system out (``--procrastinate ''``: its process phase alone takes ~3 minutes a run).
    lists = {"jobengine": args.jobengine, "pgqueuer": args.pgqueuer, "procrastinate": args.procrastinate}
    plan = [(system, s) for system, settings in lists.items() for s in settings.split(",") if s.strip()]
    measures: list[dict[str, object]] = []
    ceilings: dict[str, list[float]] = defaultdict(list)
    redis: list[str] = []
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="jobengine-compare-") as tmp:
        for run in range(1, args.runs + 1):
            tps = postgres.pgbench_ceiling(args.dsn)
            if tps is not None:
                ceilings["pgbench simple-update -c 2 -j 2 (tps)"].append(tps)
            if (r := redis_ceiling()) is not None:
                redis.append(r)
            # Interleaved phase by phase, so the systems meet the machine in the same state: the enqueue
            # phases once per system, the process and latency phases once per worker setting.
            steps = [("enqueue-batch,enqueue-single", [(s, p[0][1]) for s, p in _by_system(plan).items()])]
            steps += [("process", plan), ("latency", plan)]
            for phases, entries in steps:
                for system, setting in entries:
                    out = Path(tmp) / f"{system}-{setting.replace('/', '_')}-{phases}-{run}.json"
                    print(f"run {run}/{args.runs}: {system} {setting} {phases} ...", file=sys.stderr, flush=True)
                    if system == "jobengine":
                        run_jobengine(args, setting, out, phases)
                    else:
                        run_other(args, python, system, setting, out, tmp, phases)
                    measures += load(out, "jobengine defaults" if setting == DEFAULTS else system)
    print(f"jobengine vs {versions(python)}; {args.runs} runs, N={args.n:,}, "
          f"{time.strftime('%Y-%m-%d %H:%M')} ({time.time() - started:,.0f} s)")  # fmt: skip
    for name, values in ceilings.items():
        print(f"ceiling: {name}: median {statistics.median(values):,.0f} ({min(values):,.0f} - {max(values):,.0f})")
    for line in redis[-1:]:
        print(f"ceiling: redis-benchmark -q -n 100000 -t set,lpush,rpop: {line}")
    print(table(measures))
    if args.json:
        args.json.write_text(json.dumps(measures, indent=1, default=str))
    return 0


def _fmt(values: list[float], unit: str) -> str:
    good = [v for v in values if not math.isnan(v)]
    if not good:
        return "-"
    med = statistics.median(good)
    f = "{:,.2f}" if unit == "ms" else "{:,.0f}"
    spread = f" ({f.format(min(good))}-{f.format(max(good))})" if len(good) > 1 else ""
    return f.format(med) + spread + ("" if len(good) == len(values) else f" [{len(values) - len(good)} failed]")


def table(measures: list[dict[str, object]]) -> str:
    """One row per measure: each system's best setting (median, min-max over runs; jobengine's defaults as a
    system of their own), and two ratios to the faster other system, jobengine's defaults' then its best
    tuned setting's (above 1: jobengine is better, for latencies too)."""
    series: dict[tuple[str, str], dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    units: dict[tuple[str, str], str] = {}
    for m in measures:
        key = (str(m["phase"]), str(m["metric"]))
        series[key][(str(m["system"]), str(m["workers"]))].append(float(m["value"]))  # type: ignore[arg-type]
        units[key] = str(m["unit"])
    systems = SYSTEMS
    widths = [15, 30, 34, 34, 34, 34, 8, 6]
    cols = ["phase", "measure", *systems, "defaults", "tuned"]
    lines = ["| " + " | ".join(f"{c:<{w}}" for c, w in zip(cols, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for key in sorted(
        series, key=lambda k: (["enqueue batch", "enqueue single", "process", "latency"].index(k[0]), k[1])
    ):
        unit, lower_better = units[key], units[key] == "ms"
        best: dict[str, tuple[float, str]] = {}
        for (system, workers), values in series[key].items():
            good = [v for v in values if not math.isnan(v)]
            med = statistics.median(good) if good else math.nan
            current = best.get(system)
            better = (
                current is None or math.isnan(current[0]) or (med < current[0] if lower_better else med > current[0])
            )
            if not math.isnan(med) and better:
                best[system] = (med, workers)
        cells = []
        for system in systems:
            if system not in best:
                cells.append(f"{'-':<34}")
                continue
            med, workers = best[system]
            text = _fmt(series[key][(system, workers)], unit)
            who = "" if workers.startswith("producer") else f" [{workers}]"
            cells.append(f"{text + who:<34}")
        others = [best[s][0] for s in systems[2:] if s in best]
        ratios = []
        for mine in ("jobengine defaults", "jobengine"):
            ratio = "-"
            if mine in best and others:
                rival = min(others) if lower_better else max(others)
                ratio = f"{(rival / best[mine][0] if lower_better else best[mine][0] / rival):.2f}x"
            ratios.append(ratio)
        lines.append(f"| {key[0]:<15} | {key[1]:<30} | " + " | ".join(cells) + f" | {ratios[0]:>8} | {ratios[1]:>6} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
