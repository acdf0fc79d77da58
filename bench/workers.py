"""Starting and stopping the workers of one phase.

:class:`SubprocessWorkers` runs ``processes`` real worker processes (``python -m bench.worker``) on the
same database, each in its own session so that one SIGINT reaches it (and py-spy, when profiling). A
``memory`` store's temporary file is known to this process alone, so :class:`InProcessWorkers` runs its workers as
tasks in the benchmark's own event loop instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Protocol

from bench.config import WorkerSetting
from bench.cpu import cpu_seconds
from bench.profiling import Profiler
from bench.workload import Sink
from jobengine.engine import Engine
from jobengine.worker.runtime import Worker

_ROOT = Path(__file__).resolve().parent.parent  # so that `-m bench.worker` imports from any cwd


class Workers(Protocol):
    def start(self) -> None: ...

    def cpu_seconds(self) -> float | None:
        """CPU seconds the worker processes used so far, before stop(); None where they cannot be told apart."""
        ...

    async def stop(self) -> None: ...


class SubprocessWorkers:
    def __init__(
        self,
        database: str,
        socket_path: str,
        setting: WorkerSetting,
        synchronous: str,
        logdir: str,
        profiler: Profiler | None = None,
        tag: str = "workers",
        queue: str | None = None,
    ) -> None:
        self.setting = setting
        self._args = [
            "--database", database, "--socket", socket_path, "--synchronous", synchronous,
            "--concurrency", str(setting.concurrency), "--fetch-batch", str(setting.fetch_batch),
            "--poll-interval", str(setting.poll_interval), "--lease-seconds", str(setting.lease_seconds),
            "--loop", setting.loop, "--log-level", setting.log_level,
        ]  # fmt: skip
        if setting.prefetch is not None:
            self._args += ["--prefetch", str(setting.prefetch)]
        if queue:
            self._args += ["--queue", queue]
        self._logdir = logdir
        self._profiler = profiler
        self._tag = tag
        self._procs: list[tuple[subprocess.Popen[bytes], IO[bytes], str]] = []

    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH")) if p)
        for k in range(self.setting.processes):
            cmd = [sys.executable, "-m", "bench.worker", *self._args]
            if self._profiler is not None:
                cmd = self._profiler.wrap(cmd, f"{self._tag}-worker{k}")
            log_path = os.path.join(self._logdir, f"{self._tag}-worker{k}.log")
            log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            self._procs.append((proc, log, log_path))

    def cpu_seconds(self) -> float | None:
        """CPU seconds the worker processes used so far; None under the profiler (its pids are py-spy's)."""
        if self._profiler is not None:
            return None
        return sum(cpu_seconds(proc.pid) for proc, _, _ in self._procs)

    async def stop(self, timeout: float = 30.0) -> None:
        """SIGINT (graceful stop) to every worker's process group, then wait; SIGKILL after ``timeout``."""
        for proc, _, _ in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
        failed = []
        for proc, log, log_path in self._procs:
            try:
                rc = await asyncio.to_thread(proc.wait, timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                rc = await asyncio.to_thread(proc.wait)
            log.close()
            if rc != 0:
                failed.append((rc, log_path))
        self._procs.clear()
        for rc, log_path in failed:
            _show_tail(rc, log_path)


def _show_tail(rc: int, log_path: str) -> None:
    tail = Path(log_path).read_text(errors="replace").splitlines()[-15:]
    print(f"worker exited with {rc}; last lines of {log_path}:", *tail, sep="\n  ", file=sys.stderr)


class InProcessWorkers:
    """``processes`` jobengine workers as tasks of the current event loop (memory backend only)."""

    def __init__(self, engine: Engine, sink: Sink, socket_path: str, setting: WorkerSetting) -> None:
        self.setting = setting
        self._engine = engine
        self._sink = sink
        self._socket_path = socket_path
        self._workers: list[Worker] = []
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._sink.connect(self._socket_path)
        s = self.setting
        ahead = {} if s.prefetch is None else {"prefetch": s.prefetch}
        for _ in range(s.processes):
            worker = self._engine.worker(
                **ahead,
                concurrency=s.concurrency, fetch_batch=s.fetch_batch, poll_interval=s.poll_interval,
                lease_seconds=s.lease_seconds, heartbeat_every=s.lease_seconds / 3,
            )  # fmt: skip
            self._workers.append(worker)
            self._tasks.append(asyncio.create_task(worker.run()))

    def cpu_seconds(self) -> float | None:
        return None  # the workers share this process with the producer

    async def stop(self) -> None:
        for worker in self._workers:
            worker.stop()
        await asyncio.gather(*self._tasks)
        self._sink.close()
