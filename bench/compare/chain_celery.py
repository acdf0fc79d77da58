"""Celery's side of ``python -m bench.compare.chain``: one ``chain(noop.si(i) for i in range(n))`` on a Redis
broker with a Redis result backend, run by one Celery worker process.

Runs in the comparison venv (``/tmp/jobengine-compare-redis-venv``), never this project's:
``python -m bench.compare.chain_celery run --url redis://127.0.0.1:6379/<db> --setting solo -n 1000`` prints
one JSON line ``{"seconds": ...}``: from the ``apply_async`` call until the last task's end, the
``date_done`` the worker stores with its result (the worker's own clock: no polling delay in it). The worker
is started, and warmed up with one task, before the clock starts; the database is flushed first (it is the
one the comparison claimed).

Worker settings: ``solo`` (tasks run in the worker's main thread, one at a time) or ``threads:<n>``, the
``-P`` / ``-c`` options of ``celery worker``; everything else at Celery's defaults.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from datetime import UTC
from typing import Any

TASK = "chain_noop"
QUEUE = "chain"


def _app(url: str) -> Any:
    from celery import Celery

    app = Celery("chain", broker=url, backend=url)
    app.conf.update(task_default_queue=QUEUE, worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)

    @app.task(name=TASK)
    def chain_noop(i: int) -> None:
        return None

    return app


def work(url: str, setting: str) -> None:
    pool, _, n = setting.partition(":")
    args = ["worker", "-P", pool, "-l", "WARNING", "--without-heartbeat", "--without-gossip", "--without-mingle",
            "-Q", QUEUE]  # fmt: skip
    if n:
        args += ["-c", n]
    _app(url).worker_main(args)


def run(url: str, setting: str, n: int, timeout: float) -> float:
    from celery import chain
    from redis import Redis

    Redis.from_url(url).flushdb()
    app = _app(url)
    noop = app.tasks[TASK]
    worker = subprocess.Popen([sys.executable, "-m", "bench.compare.chain_celery", "work", "--url", url,
                               "--setting", setting])  # fmt: skip
    try:
        noop.si(-1).apply_async().get(timeout=60)  # the worker is up and connected
        signature = chain(noop.si(i) for i in range(n))
        began = time.time()
        result = signature.apply_async()
        result.get(timeout=timeout)
        done = result.date_done
        if done.tzinfo is None:  # Celery stores UTC; a naive value would be read as local time
            done = done.replace(tzinfo=UTC)
        return float(done.timestamp()) - began
    finally:
        worker.send_signal(signal.SIGTERM)  # Celery's warm shutdown
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        app.close()


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compare.chain_celery", description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("run", "work"))
    p.add_argument("--url", required=True, help="the Redis database (flushed)")
    p.add_argument("--setting", default="solo", help="solo or threads:<n>")
    p.add_argument("-n", type=int, default=1_000)
    p.add_argument("--timeout", type=float, default=600.0)
    args = p.parse_args()
    if args.mode == "work":
        work(args.url, args.setting)
        return 0
    print(json.dumps({"seconds": run(args.url, args.setting, args.n, args.timeout)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
