"""Sampling profiles of the benchmark (``--profile DIR``) with py-spy, and a summary of where time goes.

Worker processes are started under ``py-spy record``; the producer (this process) is sampled by a
``py-spy record --pid`` started around each enqueue phase. Profiles are written in py-spy's ``raw``
(collapsed stack) format; :func:`summarize` turns one into the functions with the most samples.
Sampling slows the measured code, so the figures of a profiled run are not benchmark results.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


class Profiler:
    def __init__(self, directory: str, rate: int = 250, idle: bool = False) -> None:
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if not os.path.exists(exe):
            raise SystemExit("--profile needs py-spy: pip install py-spy")
        self.exe = exe
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.rate = rate
        #: Also sample threads that wait (lock waits, sleeps, the idle event loop): a wall-clock view.
        self.options = ["--rate", str(rate), "--format", "raw", "--nonblocking", *(["--idle"] if idle else [])]

    def output(self, name: str) -> Path:
        return self.directory / f"{name}.txt"

    def wrap(self, cmd: list[str], name: str) -> list[str]:
        """``cmd`` run under py-spy, writing ``DIR/name.txt``."""
        return [self.exe, "record", *self.options, "--output", str(self.output(name)), "--", *cmd]

    @contextlib.contextmanager
    def attach(self, name: str, pid: int | None = None) -> Iterator[None]:
        """Sample process ``pid`` (this one by default) while the block runs."""
        cmd = [self.exe, "record", *self.options, "--pid", str(pid or os.getpid()), "--output", str(self.output(name))]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            yield
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _parse(line: str) -> tuple[list[tuple[str, str]], int] | None:
    stack, _, count = line.rstrip("\n").rpartition(" ")
    if not stack or not count.isdigit():
        return None
    frames = []
    for raw in stack.split(";"):
        m = _FRAME.match(raw)
        frames.append((m.group("func"), m.group("file")) if m else (raw, ""))
    return frames, int(count)


def _short(func: str, file: str) -> str:
    if "site-packages" in file or "/lib/python" in file:
        file = file.rsplit("/", 1)[-1]
    elif "/src/jobengine/" in file:
        file = "jobengine/" + file.split("/src/jobengine/", 1)[1]
    elif "/bench/" in file:
        file = "bench/" + file.split("/bench/", 1)[1]
    return f"{func} ({file})" if file else func


def summarize(paths: list[Path], top: int = 15) -> str:
    """Functions by inclusive and self share of the samples of ``paths`` (collapsed stacks)."""
    total = imports = 0
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            parsed = _parse(line)
            if parsed is None:
                continue
            frames, count = parsed
            total += count
            if any(file.startswith("<frozen importlib") for _, file in frames):
                imports += count  # process start-up, not the hot path: counted apart
                continue
            names = [_short(f, file) for f, file in frames if not f.startswith(("process ", "thread "))]
            for name in set(names):
                inclusive[name] += count
            if names:
                own[names[-1]] += count
    if not total:
        return "  (no samples)"
    lines = [
        f"  {total} samples; {100 * imports / total:.1f}% importing modules (start-up);",
        "  inclusive (jobengine and sqlite3 functions; the C time of a sqlite3 call, fsync included, is its caller's):",
    ]
    picked = [(n, c) for n, c in inclusive.most_common() if "jobengine/" in n or "sqlite" in n.lower()]
    lines += [f"    {100 * c / total:5.1f}%  {n}" for n, c in picked[:top]]
    lines.append("  self (leaf functions):")
    lines += [f"    {100 * c / total:5.1f}%  {n}" for n, c in own.most_common(top)]
    return "\n".join(lines)
