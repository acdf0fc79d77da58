"""Client instructions per enqueue, counted by callgrind: repeatable whatever else the machine is doing.

    python -m bench.instructions --dsn postgresql://postgres@127.0.0.1/postgres single
    python -m bench.instructions --dsn postgresql://postgres@127.0.0.1/postgres batch

Runs this module under ``valgrind --tool=callgrind`` twice, with ``--few`` and ``--many`` operations (after
warming up), and prints (instructions of the longer run - of the shorter) / (many - few): the cost of one
operation in the client process alone (the server is another process). ``single``: ``engine.enqueue`` of
one job; ``batch``: ``engine.enqueue_many`` of 1,000 jobs built with ``engine.new_job`` (as the standard
workload does), reported per job. Needs valgrind; slow (~50x), so the counts are small by default.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.stores import fresh_store
from bench.workload import TASK, make_engine, payload


async def _work(dsn: str, kind: str, n: int) -> None:
    store = fresh_store("postgres", dsn, None)
    engine, _ = make_engine(store.database, "FULL", None)
    await engine.start()
    try:
        for i in range(20):  # warm: prepared statements, the lane connection
            await engine.enqueue(TASK, payload(i))
        await asyncio.sleep(0.2)
        for i in range(n):
            if kind == "single":
                await engine.enqueue(TASK, payload(i))
            else:
                await engine.enqueue_many([engine.new_job(TASK, payload(k)) for k in range(1000)])
    finally:
        await engine.close()
        store.cleanup()


def _count(dsn: str, kind: str, n: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m",
               "bench.instructions", "--dsn", dsn, "--run", str(n), kind]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        match = re.search(r"Collected : (\d+)", done.stderr)
        if match is None:
            raise SystemExit(f"no instruction count in valgrind's output:\n{done.stderr[-2000:]}")
        return int(match.group(1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.instructions")
    p.add_argument("kind", choices=["single", "batch"])
    p.add_argument("--dsn", required=True)
    p.add_argument("--few", type=int, default=None, help="operations of the shorter run (single 300, batch 2)")
    p.add_argument("--many", type=int, default=None, help="operations of the longer run (single 1300, batch 12)")
    p.add_argument("--run", type=int, default=None, help=argparse.SUPPRESS)  # inside valgrind
    args = p.parse_args(argv)
    if args.run is not None:
        asyncio.run(_work(args.dsn, args.kind, args.run))
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    few = args.few if args.few is not None else (300 if args.kind == "single" else 2)
    many = args.many if args.many is not None else (1300 if args.kind == "single" else 12)
    a, b = _count(args.dsn, args.kind, few), _count(args.dsn, args.kind, many)
    per_op = (b - a) / (many - few)
    unit = "per enqueue" if args.kind == "single" else "per job (batches of 1,000)"
    print(f"{args.kind}: {per_op / (1 if args.kind == 'single' else 1000):,.0f} client instructions {unit} "
          f"({a:,} for {few}, {b:,} for {many})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
