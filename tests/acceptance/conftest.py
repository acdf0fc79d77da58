from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


class Procs:
    """Worker subprocesses of one test; all are killed at teardown, whatever happened."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp = tmp
        self.env = env
        self.procs: list[subprocess.Popen[bytes]] = []

    def worker(self, *args: str, app: str = "tests.support.ledger_app:app") -> subprocess.Popen[bytes]:
        n = len(self.procs)
        with open(self.tmp / f"worker{n}.out", "wb") as out:  # the child keeps its own descriptor
            p = subprocess.Popen(
                [sys.executable, "-m", "jobengine", "worker", "--app", app, *args],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(p)
        return p

    def wait_ready(self, p: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
        """Until the worker logged that it runs (its signal handlers are installed by then)."""
        deadline = time.monotonic() + timeout
        while "started on queues" not in self.output(p):
            assert p.poll() is None, self.output(p)
            assert time.monotonic() < deadline, f"worker did not start: {self.output(p)}"
            time.sleep(0.05)

    def output(self, p: subprocess.Popen[bytes]) -> str:
        return (self.tmp / f"worker{self.procs.index(p)}.out").read_text(errors="replace")

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "JOBENGINE_DATABASE": str(tmp_path / "jobs.db"),
        "LEDGER": str(tmp_path / "ledger.txt"),
    }
    p = Procs(tmp_path, env)
    yield p
    p.kill_all()
