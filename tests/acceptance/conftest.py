from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.processes import Processes

ROOT = Path(__file__).resolve().parents[2]


class Procs(Processes):
    """Worker subprocesses of one test (``worker<n>.out``); all are killed at teardown, whatever happened."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        super().__init__(tmp, env, ROOT)

    def worker(self, *args: str, app: str = "tests.support.ledger_app:app") -> subprocess.Popen[bytes]:
        return self.spawn(f"worker{len(self.procs)}", "worker", "--app", app, *args)

    def wait_ready(self, p: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
        """Until the worker logged that it runs (its signal handlers are installed by then)."""
        self.wait_output(p, "started on queues", timeout)


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
