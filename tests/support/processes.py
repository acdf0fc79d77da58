"""Named subprocesses of one test: each one's output in ``<tmp>/<name>.out``, all SIGKILLed at the end."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path


class Processes:
    def __init__(self, tmp: Path, env: dict[str, str], cwd: Path) -> None:
        self.tmp = tmp
        self.env = env
        self.cwd = cwd
        self.procs: list[subprocess.Popen[bytes]] = []

    def run(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start ``argv`` with this test's environment (``env`` on top of it), its output to ``name``."""
        with open(self.tmp / f"{name}.out", "wb") as out:
            p = subprocess.Popen(list(argv), env={**self.env, **(env or {})}, cwd=self.cwd, stdout=out,
                                 stderr=subprocess.STDOUT)  # fmt: skip
        self.procs.append(p)
        return p

    def output(self, name: str) -> str:
        return (self.tmp / f"{name}.out").read_text(errors="replace")

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
