"""``python -m bench.compare.redis_compare``: jobengine over Redis and NATS against RQ, arq, Celery, Dramatiq
and Huey (Redis broker), the standard workload of ``bench/README.md``, on the same machine, one table.

- jobengine runs its own harness (``python -m bench --transport redis|nats``): the jobs' state is recorded
  in the store (``--backend``, SQLite by default, ``synchronous=FULL``) and delivered by the broker.
- The others run in two comparison venvs that this command creates the first time (never committed):
  ``/tmp/jobengine-compare-redis-venv`` (RQ, Celery, Dramatiq, Huey) and ``/tmp/jobengine-compare-arq-venv``
  (arq, which pins redis-py below 6), each with this checkout installed for the shared collector.
- Every run runs every system at every worker setting once, interleaved (jobengine-redis, jobengine-nats,
  rq, arq, ...), and measures the machine's ceiling (``redis-benchmark -q -n 100000 -t set,lpush,rpop``).
  The table shows each system's best setting per measure (median and min-max over runs).
- Redis: one database number claimed for the whole comparison (the tests' lock keys in db 0, so a test run
  never shares it), flushed before every phase of the other systems; jobengine's phases use key prefixes
  of their own in it and remove them.

Worker settings, comma lists: ``--jobengine 500`` (concurrency per process), ``--rq simple``,
``--arq 100``, ``--celery threads:8``, ``--dramatiq 8``, ``--huey thread:8``; see
:mod:`bench.compare.redis_systems`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENVS = {
    "redis": (Path("/tmp/jobengine-compare-redis-venv"), ["rq", "celery[redis]", "dramatiq[redis]", "huey", "hiredis"]),
    "arq": (Path("/tmp/jobengine-compare-arq-venv"), ["arq", "hiredis"]),
}
OTHERS = {"rq": "redis", "arq": "arq", "celery": "redis", "dramatiq": "redis", "huey": "redis"}
SYSTEMS = ["jobengine-redis", "jobengine-nats", *OTHERS]
_LOCK = "jobengine-tests:db-lock:{}"


def ensure_venv(name: str) -> Path:
    venv, packages = VENVS[name]
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv} with {', '.join(packages)} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if subprocess.run([str(python), "-c", "import jobengine, " + packages[0].split("[")[0]]).returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages, "-e", str(ROOT)], check=True)
    return python


def versions() -> str:
    found = []
    for name, (venv, packages) in VENVS.items():
        names = [p.split("[")[0] for p in packages if p != "hiredis"] + ["redis"]
        code = "import importlib.metadata as m, sys; print(', '.join(f'{p} {m.version(p)}' for p in sys.argv[1:]))"
        out = subprocess.run([str(venv / "bin" / "python"), "-c", code, *names], capture_output=True, text=True)
        found.append(f"[{name} venv] {out.stdout.strip()}")
    return "; ".join(found)


def claim_db(url: str) -> tuple[int, str, object]:
    """A Redis database number (1-15) for this comparison alone, claimed as the tests claim theirs."""
    from redis import Redis

    admin = Redis.from_url(url.rsplit("/", 1)[0] + "/0")
    token = f"{os.getpid()}:{uuid.uuid4().hex}"
    for db in range(15, 0, -1):
        if admin.set(_LOCK.format(db), token, nx=True, ex=3 * 3600):
            return db, token, admin
    raise SystemExit("every Redis database 1-15 is claimed (a test run?): try again later")


def release_db(db: int, token: str, admin: object) -> None:
    script = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end"
    admin.eval(script, 1, _LOCK.format(db), token)  # type: ignore[attr-defined]


def redis_ceiling(host: str, port: int) -> str | None:
    done = subprocess.run(
        ["redis-benchmark", "-h", host, "-p", str(port), "-q", "-n", "100000", "-t", "set,lpush,rpop"],
        capture_output=True, text=True,
    )  # fmt: skip
    lines = [ln.split("\r")[-1].strip() for ln in done.stdout.splitlines() if "requests per second" in ln]
    return "; ".join(lines) or None


def run_jobengine(args: argparse.Namespace, transport: str, url: str, setting: str, out: Path) -> None:
    cmd = [sys.executable, "-m", "bench", "--backend", args.backend, "--transport", transport, "--broker-url", url,
           "--runs", "1", "--no-ceilings", "-n", str(args.n), "--duration", str(args.duration),
           "--rate", str(args.rate), "--concurrency", setting, "--json", str(out)]  # fmt: skip
    if args.dsn:
        cmd += ["--dsn", args.dsn]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def run_other(args: argparse.Namespace, system: str, url: str, setting: str, out: Path, logdir: str) -> None:
    python = VENVS[OTHERS[system]][0] / "bin" / "python"
    cmd = [str(python), "-m", "bench.compare.redis_driver", "phases", system, "--url", url, "--setting", setting,
           "-n", str(args.n), "--duration", str(args.duration), "--rate", str(args.rate), "--json", str(out),
           "--logdir", logdir]  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def load(path: Path, system: str) -> list[dict[str, object]]:
    raw = json.loads(path.read_text())
    measures = raw["measures"] if isinstance(raw, dict) else raw
    return [{**m, "system": system} for m in measures]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compare.redis_compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--redis", default="redis://127.0.0.1:6379", help="the Redis server (a db number is claimed)")
    p.add_argument("--nats", default="nats://127.0.0.1:4222")
    p.add_argument("--backend", default="sqlite", choices=("sqlite", "postgres"), help="jobengine's store")
    p.add_argument("--dsn", help="--backend postgres")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("-n", type=int, default=20_000)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma list of " + ", ".join(SYSTEMS))
    p.add_argument("--jobengine", default="500", help="concurrency per worker process (list)")
    p.add_argument("--rq", default="simple")
    p.add_argument("--arq", default="200")
    p.add_argument("--celery", default="threads:8")
    p.add_argument("--dramatiq", default="8")
    p.add_argument("--huey", default="thread:8")
    p.add_argument("--json", type=Path, help="also write every measure here")
    args = p.parse_args(argv)

    chosen = [s for s in args.systems.split(",") if s]
    for name in {OTHERS[s] for s in chosen if s in OTHERS}:
        ensure_venv(name)
    plan = []
    for system in chosen:
        knob = args.jobengine if system.startswith("jobengine") else getattr(args, system)
        plan += [(system, setting) for setting in knob.split(",")]
    db, token, admin = claim_db(args.redis)
    url = f"{args.redis}/{db}"
    host, port = args.redis.split("//")[1].split(":")
    measures: list[dict[str, object]] = []
    ceilings: list[str] = []
    started = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="jobengine-compare-redis-") as tmp:
            for run in range(1, args.runs + 1):
                if (c := redis_ceiling(host, int(port))) is not None:
                    ceilings.append(c)
                for system, setting in plan:
                    out = Path(tmp) / f"{system}-{setting.replace(':', '_')}-{run}.json"
                    print(f"run {run}/{args.runs}: {system} {setting} ...", file=sys.stderr, flush=True)
                    try:
                        if system.startswith("jobengine"):
                            transport = system.split("-")[1]
                            run_jobengine(args, transport, url if transport == "redis" else args.nats, setting, out)
                        else:
                            run_other(args, system, url, setting, out, tmp)
                    except subprocess.CalledProcessError as exc:
                        print(f"  {system} {setting} failed: {exc}", file=sys.stderr)
                        continue
                    measures += load(out, system)
    finally:
        release_db(db, token, admin)
    took = time.time() - started
    print(f"jobengine ({args.backend} store) vs {versions()}; {args.runs} runs, N={args.n:,}, "
          f"{time.strftime('%Y-%m-%d %H:%M')} ({took:,.0f} s), load {os.getloadavg()[0]:.2f}")  # fmt: skip
    for line in ceilings:
        print(f"ceiling: redis-benchmark -q -n 100000 -t set,lpush,rpop: {line}")
    print(table(measures, [s for s in SYSTEMS if s in chosen]))
    if args.json:
        args.json.write_text(json.dumps(measures, indent=1, default=str))
    return 0


def _cell(values: list[float], unit: str) -> str:
    good = [v for v in values if not math.isnan(v)]
    if not good:
        return "-"
    f = "{:,.1f}" if unit == "ms" else "{:,.0f}"
    spread = f" ({f.format(min(good))}-{f.format(max(good))})" if len(good) > 1 else ""
    return f.format(statistics.median(good)) + spread + ("" if len(good) == len(values) else " [failed runs]")


def table(measures: list[dict[str, object]], systems: list[str]) -> str:
    """One column per system: its best setting's median (min-max over runs) and the setting; a row per
    measure. Best is highest for jobs/s, lowest for latencies."""
    series: dict[tuple[str, str], dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    units: dict[tuple[str, str], str] = {}
    for m in measures:
        key = (str(m["phase"]), str(m["metric"]).split(" (")[0] if m["phase"] == "enqueue batch" else str(m["metric"]))
        series[key][(str(m["system"]), str(m["workers"]))].append(float(m["value"]))  # type: ignore[arg-type]
        units[key] = str(m["unit"])
    order = ["enqueue batch", "enqueue single", "process", "latency"]
    lines = ["| phase | measure | " + " | ".join(systems) + " |", "|---|---|" + "---|" * len(systems)]
    for key in sorted(series, key=lambda k: (order.index(k[0]) if k[0] in order else 9, k[1])):
        unit = units[key]
        cells = []
        for system in systems:
            runs = {w: v for (s, w), v in series[key].items() if s == system}
            if not runs:
                cells.append("-")
                continue

            def score(item: tuple[str, list[float]], unit: str = unit) -> float:
                good = [v for v in item[1] if not math.isnan(v)]
                if not good:
                    return -math.inf
                med = statistics.median(good)
                return -med if unit == "ms" else med

            workers, values = max(runs.items(), key=score)
            who = "" if workers.startswith("producer") else f" [{workers}]"
            cells.append(_cell(values, unit) + who)
        lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
