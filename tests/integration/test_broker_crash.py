"""A broker killed with SIGKILL mid-run and restarted loses nothing and runs nothing twice.

Each test starts its own broker on a free port in a temp dir, with durable settings: redis-server with
``appendonly yes`` and ``appendfsync always``; nats-server with JetStream's file store. 5,000 jobs are
enqueued in batches while two workers run them; when 1,500 have run, the broker is killed (-9) and started
again on the same port and directory a moment later, while enqueueing goes on (the outbox keeps what the
broker cannot take). Then: every job whose enqueue returned has succeeded, and none ran twice.
"""

from __future__ import annotations

import asyncio
import collections
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from jobengine.core.queue_config import NatsConfig, QueueConfig, RedisConfig
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.settings import Settings
from support.services import unavailable

N = 5_000
KILL_AFTER = 1_500

pytestmark = pytest.mark.timeout(300)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int, probe: bytes | None, expect: bytes) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            if probe:
                s.sendall(probe)
            return s.recv(64).startswith(expect)
    except OSError:
        return False


class Broker:
    """A broker process we own: start, kill -9, start again (same port, same data directory)."""

    def __init__(self, kind: str, directory: Path) -> None:
        self.kind = kind
        self.dir = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        binary = "redis-server" if kind == "redis" else "nats-server"
        found = shutil.which(binary) or next(
            (p for p in (f"/usr/bin/{binary}", f"/usr/sbin/{binary}") if os.path.exists(p)), None
        )
        if found is None:
            unavailable(f"{binary} is not installed")
        self.binary = found

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0" if self.kind == "redis" else f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        if self.kind == "redis":
            cmd = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                   "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no"]  # fmt: skip
            probe, expect = b"*1\r\n$4\r\nPING\r\n", b"+PONG"
        else:
            cmd = [self.binary, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.dir)]
            probe, expect = None, b"INFO"
        log = open(self.dir / f"{self.kind}.log", "ab")  # noqa: SIM115 - the process writes to it until killed
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 15
        while not _answers(self.port, probe, expect):
            assert self.proc.poll() is None, (self.dir / f"{self.kind}.log").read_text()[-2000:]
            assert time.monotonic() < deadline, f"{self.kind} did not start"
            time.sleep(0.05)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()


@contextmanager
def broker(kind: str, tmp_path: Path) -> Iterator[Broker]:
    b = Broker(kind, tmp_path)
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["redis", "nats"])
async def test_kill_9_of_the_broker_mid_run_loses_no_job_and_runs_none_twice(kind: str, tmp_path: Path) -> None:
    with broker(kind, tmp_path) as b:
        queue = QueueConfig(kind=kind, redis=RedisConfig(url=b.url), nats=NatsConfig(url=b.url))
        settings = Settings(database=str(tmp_path / "jobs.db"), queue=queue, lease_seconds=5.0, rescue_interval=0.5,
                            sqlite_synchronous="NORMAL")  # fmt: skip
        engine = Engine.from_settings(settings)
        runs: collections.Counter[str] = collections.Counter()
        half_way = asyncio.Event()

        @engine.task()
        async def work(ctx: Any) -> None:
            runs[ctx.job.id] += 1
            if len(runs) >= KILL_AFTER:
                half_way.set()

        enqueued: list[str] = []
        killed_at_runs = 0

        async def produce() -> None:
            for start in range(0, N, 100):
                jobs = await engine.enqueue_many([engine.new_job("work", {"i": i}) for i in range(start, start + 100)])
                enqueued.extend(j.id for j in jobs)  # the enqueue returned: these must run
                await asyncio.sleep(0.02)

        async def chaos() -> None:
            nonlocal killed_at_runs
            await half_way.wait()
            killed_at_runs = sum(runs.values())
            b.kill()
            await asyncio.sleep(0.7)  # down: publishes, receives and acks fail meanwhile
            await asyncio.to_thread(b.start)

        async with engine:
            workers = [engine.worker(concurrency=50, poll_interval=0.2, lease_seconds=5.0, heartbeat_every=1.0)
                       for _ in range(2)]  # fmt: skip
            tasks = [asyncio.create_task(w.run()) for w in workers]
            try:
                await asyncio.wait_for(asyncio.gather(produce(), chaos()), 60)
                deadline = time.monotonic() + 60
                while True:
                    counts = await engine.count_jobs()
                    done = sum(n for (_, state), n in counts.items() if state is JobState.SUCCEEDED)
                    if done == len(enqueued):
                        break
                    assert time.monotonic() < deadline, f"only {done} of {len(enqueued)} succeeded: {counts}"
                    await asyncio.sleep(0.1)
            finally:
                for w in workers:
                    w.stop()
                await asyncio.gather(*tasks)
            assert 0 < killed_at_runs < N  # the broker really died mid-run
            assert len(enqueued) == N
            assert set(runs) == set(enqueued)
            twice = {job: n for job, n in runs.items() if n > 1}
            assert not twice, f"{len(twice)} jobs ran more than once"
            jobs = await engine.store.get_jobs(enqueued[:: N // 50])
            assert all(j.state is JobState.SUCCEEDED and j.attempt == 1 for j in jobs)
