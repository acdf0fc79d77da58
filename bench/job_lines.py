"""What a worker's job lines cost: ``python -m bench.job_lines``.

A worker at its default level (info) writes a line as each job ends, and one as it starts when it is still
running 0.1 s later (``worker/joblog.py``), through the command line's handler (``cli/logs.py``). This
measures that path alone, as a worker takes it: the job lines' middleware called in a running event loop as
``--batch`` short jobs start and end in each loop turn (a claimed batch), ``--jobs`` jobs in all. The lines
go to stderr as a process's stderr usually is: a pipe read by another process (a container runtime,
systemd, a supervisor), a file, or /dev/null. Each row is the median over ``--runs`` child processes of the
child's CPU time per job (user + system), with the reader's CPU time per job beside it for the pipe (a
collector woken by every write spends it on the same cores).

Usage (from the project root)::

    .venv/bin/python -m bench.job_lines
    .venv/bin/python -m bench.job_lines --runs 7 --to pipe,file

Compare two trees side by side by running it with each one's ``src`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time


def child(jobs: int, batch: int, level: str) -> None:
    """Writes the job lines and prints the CPU seconds they took."""
    from jobengine.cli.logs import configure_logging
    from jobengine.core.models import Job
    from jobengine.core.states import JobState
    from jobengine.worker import joblog

    configure_logging(level, "text")
    turn = [Job(f"0193a{i:021d}", "default", "default", "report", {}, 0, 0.0, JobState.RUNNING, 1, 3, 0.0, 0.0)
            for i in range(batch)]  # fmt: skip

    lines = joblog.JobLog()

    async def run() -> float:
        start = time.process_time()
        for _ in range(max(1, jobs // batch)):
            for job in turn:
                lines.before_run(job)
                lines.after_attempt(job, "succeeded", 0.004, None)
            await asyncio.sleep(0)
        return time.process_time() - start

    print(asyncio.run(run()), flush=True)


def measure(to: str, jobs: int, batch: int, level: str) -> tuple[float, float]:
    """One child's CPU µs per job, and its reader's (0 unless ``to`` is a pipe)."""
    cmd = [sys.executable, "-m", "bench.job_lines", "--child", "--jobs", str(jobs), "--batch", str(batch),
           "--level", level]  # fmt: skip
    if to == "pipe":
        reader = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        out = subprocess.run(cmd, stderr=reader.stdin, stdout=subprocess.PIPE, text=True, check=True).stdout
        assert reader.stdin is not None
        reader.stdin.close()
        _, _, usage = os.wait4(reader.pid, 0)
        return float(out) / jobs * 1e6, (usage.ru_utime + usage.ru_stime) / jobs * 1e6
    with tempfile.TemporaryFile() if to == "file" else open(os.devnull, "w") as sink:
        out = subprocess.run(cmd, stderr=sink, stdout=subprocess.PIPE, text=True, check=True).stdout
    return float(out) / jobs * 1e6, 0.0


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.job_lines", description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=50, help="jobs whose lines one loop turn writes")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--to", default="pipe,file,devnull", help="where stderr goes (comma list)")
    p.add_argument("--level", default="info,warning", help="worker log levels (comma list)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.jobs, args.batch, args.level)
        return
    print(f"job lines: {args.jobs:,} jobs, {args.batch} per loop turn, median of {args.runs} processes")
    print(f"{'stderr':<8} {'level':<8} {'worker CPU µs/job':>18} {'reader CPU µs/job':>18}")
    for to in args.to.split(","):
        for level in args.level.split(","):
            runs = [measure(to, args.jobs, args.batch, level) for _ in range(args.runs)]
            mine = statistics.median(r[0] for r in runs)
            reader = statistics.median(r[1] for r in runs)
            shown = f"{reader:18.2f}" if to == "pipe" else f"{'-':>18}"
            print(f"{to:<8} {level:<8} {mine:18.2f} {shown}")


if __name__ == "__main__":
    main()
