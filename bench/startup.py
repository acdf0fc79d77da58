"""Start-up of the processes a user launches: ``python -m bench.startup``.

Two tables, each a median over ``--runs`` launches (min - max beside it), on SQLite in a temp dir:

- **commands**: the wall time (and the CPU time, user + system, steadier on a busy machine) of
  ``jobengine --help``, ``jobengine jobs list --db FILE`` (a migrated, empty file), ``jobengine migrate
  --db FILE`` (nothing to apply) and ``python -c "import jobengine"``, each run to its exit.
- **worker**: one job is enqueued, then ``jobengine worker --app startup_app:engine`` is launched; timed from
  just before the launch to the moment the job's body starts (it sends ``time.time()`` in one datagram to
  the benchmark's AF_UNIX socket), then the worker is stopped with SIGINT and waited for. A worker that
  does not run the job within 60 s fails the benchmark.

Usage (from the project root)::

    .venv/bin/python -m bench.startup              # 5 launches per row
    .venv/bin/python -m bench.startup --runs 11
    .venv/bin/python -m bench.startup --only worker

The processes run as an installed package does: with bytecode caches (the first, unmeasured launch of
each row writes them, even where ``PYTHONDONTWRITEBYTECODE`` is set) and without ``JOBENGINE_*`` settings.
On a shared machine the figures swing with the load: compare medians of runs taken side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

APP = textwrap.dedent(
    """
    import os
    import socket
    import struct
    import time

    from jobengine import Engine, JobContext, Settings

    engine = Engine.from_settings(Settings(database=os.environ["STARTUP_DB"]))


    @engine.task()
    async def ping(ctx: JobContext) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(struct.pack("<d", time.time()), os.environ["STARTUP_SOCKET"])
    """
)
STAMP = struct.Struct("<d")
CEILING = 60.0


def _jobengine() -> str:
    """The console script beside this interpreter (the venv's), as a user runs it."""
    script = Path(sys.executable).with_name("jobengine")
    if not script.exists():
        raise SystemExit(f"{script} not found: install the project in this interpreter's environment")
    return str(script)


def _timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run of ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


async def _enqueue(database: str) -> None:
    from jobengine import Engine, Settings

    async with Engine.from_settings(Settings(database=database)) as engine:
        await engine.enqueue("ping", {})


def _migrate(database: str) -> None:
    async def go() -> None:
        from jobengine import Engine, Settings

        async with Engine.from_settings(Settings(database=database)):
            pass

    asyncio.run(go())


def _worker_once(tmp: Path, n: int, env: dict[str, str]) -> tuple[float, float | None]:
    database = str(tmp / f"worker-{n}.db")
    sock_path = str(tmp / f"worker-{n}.sock")
    asyncio.run(_enqueue(database))
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(sock_path)
        sock.settimeout(CEILING)
        env = {**env, "STARTUP_DB": database, "STARTUP_SOCKET": sock_path}
        launched = time.time()
        proc = subprocess.Popen(
            [_jobengine(), "worker", "--app", "startup_app:engine"],
            cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            started = STAMP.unpack(sock.recv(STAMP.size))[0]
        except TimeoutError:
            proc.kill()
            _, err = proc.communicate()
            raise SystemExit(f"the worker did not start the job within {CEILING:g}s:\n{err.decode()}") from None
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=CEILING)
        if proc.returncode != 0:
            raise SystemExit(f"the worker exited {proc.returncode}:\n{err.decode()}")
    return started - launched, None


Row = tuple[str, list[float], list[float]]


def _row(name: str, measure: Callable[[int], tuple[float, float | None]], runs: int) -> Row:
    measure(-1)  # warms the page cache and the bytecode caches outside the figures
    measured = [measure(i) for i in range(runs)]
    walls = [wall for wall, _ in measured]
    cpus = [cpu for _, cpu in measured if cpu is not None]
    print(f"  {name}: {' '.join(f'{t * 1000:.0f}' for t in walls)} ms", file=sys.stderr)
    return name, walls, cpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="launches per row (default 5)")
    parser.add_argument("--only", choices=("commands", "worker"), help="one table only")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "startup_app.py").write_text(APP)
        # As a user's installed package runs: bytecode cached (the warm-up run writes it), no JOBENGINE_*.
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBENGINE_") and k != "PYTHONDONTWRITEBYTECODE"}
        if args.only in (None, "commands"):
            db = str(tmp / "cli.db")
            _migrate(db)
            exe = _jobengine()
            for name, argv_ in (
                ("jobengine --help", [exe, "--help"]),
                ("jobengine jobs list --db FILE", [exe, "jobs", "list", "--db", db]),
                ("jobengine migrate --db FILE", [exe, "migrate", "--db", db]),
                ('python -c "import jobengine"', [sys.executable, "-c", "import jobengine"]),
            ):
                rows.append(_row(name, lambda _, a=argv_: _timed(a, tmp, env), args.runs))  # type: ignore[misc]
        if args.only in (None, "worker"):
            rows.append(_row("worker: launch → first job started", lambda i: _worker_once(tmp, i, env), args.runs))
    print(f"{'what':<38} {'wall p50 ms':>11} {'min - max ms':>14} {'cpu p50 ms':>10}")
    for name, walls, cpus in rows:
        spread = f"{min(walls) * 1000:.0f} - {max(walls) * 1000:.0f}"
        cpu = f"{statistics.median(cpus) * 1000:.0f}" if cpus else "-"
        print(f"{name:<38} {statistics.median(walls) * 1000:>11.0f} {spread:>14} {cpu:>10}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
