"""Named subprocesses of one test: each one's output in ``<tmp>/<name>.out``, all SIGKILLed at the end."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path


class Processes:
    """Starts processes with one environment and working directory; ``stop_all`` (at teardown) kills any
    still running. A process is named when started; its output is read by that name or by the process."""

    def __init__(self, tmp: Path, env: dict[str, str], cwd: Path) -> None:
        self.tmp = tmp
        self.env = env
        self.cwd = cwd
        self.procs: dict[subprocess.Popen[bytes], str] = {}  # each process and its name, in start order

    def run(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start ``argv`` with this test's environment (``env`` on top of it), its output to ``name``.

        Its stdin is /dev/null: a background process never reads the test runner's terminal."""
        with open(self.tmp / f"{name}.out", "wb") as out:  # the child keeps its own descriptor
            p = subprocess.Popen(list(argv), env={**self.env, **(env or {})}, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        self.procs[p] = name
        return p

    def spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """``python -m jobengine <args>``."""
        return self.run(name, [sys.executable, "-m", "jobengine", *args], env)

    def output(self, p: subprocess.Popen[bytes] | str) -> str:
        """The output so far of a process started here, or of the one started under that name."""
        name = p if isinstance(p, str) else self.procs[p]
        return (self.tmp / f"{name}.out").read_text(errors="replace")

    def wait_output(self, p: subprocess.Popen[bytes], text: str, timeout: float) -> None:
        """Until ``text`` is in ``p``'s output; fails at once if ``p`` exits first, or after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while text not in self.output(p):
            assert p.poll() is None, self.output(p)
            assert time.monotonic() < deadline, f"{self.procs[p]} did not print {text!r}: {self.output(p)}"
            time.sleep(0.05)

    def kill(self, p: subprocess.Popen[bytes]) -> None:
        """SIGKILL ``p`` (unless it has exited) and reap it."""
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait()

    def stop_all(self) -> None:
        for p in self.procs:
            self.kill(p)
