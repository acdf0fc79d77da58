from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import Processes

ROOT = Path(__file__).resolve().parents[2]


class Procs(Processes):
    """Worker subprocesses of one test (``worker<n>.out``); all are killed at teardown, whatever happened."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        super().__init__(tmp, env, ROOT)

    def worker(self, *args: str, app: str = "tests.support.ledger_app:app") -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "jobengine", "worker", "--app", app, *args]
        return self.run(f"worker{len(self.procs)}", argv)

    def wait_ready(self, p: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
        """Until the worker logged that it runs (its signal handlers are installed by then)."""
        deadline = time.monotonic() + timeout
        while "started on queues" not in self.output(p):
            assert p.poll() is None, self.output(p)
            assert time.monotonic() < deadline, f"worker did not start: {self.output(p)}"
            time.sleep(0.05)

    def output(self, p: subprocess.Popen[bytes] | str) -> str:
        """A worker's output, by its process (or by name, as :class:`Processes` reads it)."""
        return super().output(p if isinstance(p, str) else f"worker{self.procs.index(p)}")


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
    p.stop_all()
