"""``python -m bench.hosts`` at a tiny size, on the real bed (network namespaces, a PostgreSQL cluster of the
database host, an API host, worker hosts running the deploy files' ``jobengine worker``): it measures 1 and
2 worker hosts, prints its table and writes its result file. Nothing here is timed: the figures are the
bench's to print. Needs root, ``ip`` and PostgreSQL's server binaries: skips locally without them, fails
under ``CI``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.deploy import ROOT
from support.services import unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def test_the_bench_measures_each_number_of_worker_hosts_and_writes_its_result(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        unavailable("bench.hosts makes network namespaces: it needs root and `ip` (iproute2)")
    result = tmp_path / "hosts.md"
    argv = ["--jobs", "200", "--runs", "1", "--hosts", "1,2", "--sleep-ms", "10", "--result", str(result)]
    done = subprocess.run(
        [sys.executable, "-m", "bench.hosts", *argv], cwd=ROOT, capture_output=True, text=True, timeout=360
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {
        int(cells[1]): cells
        for line in done.stdout.splitlines()
        if line.startswith("| I/O-bound (sleep 10 ms)")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    assert sorted(rows) == [1, 2], done.stdout
    for cells in rows.values():
        drained, steady, busy = (float(c.replace(",", "")) for c in (cells[2], cells[3], cells[5]))
        assert drained > 0 and steady > 0 and 0 < busy <= 100, cells
        assert cells[-1] == "ok", cells  # every job ran once and the store drained
    # One line names what bounds the 2-host rate, whichever of the four cases the machine's load made it.
    (note,) = re.findall(r"^- I/O-bound \(sleep 10 ms\), 2 worker host\(s\): (.*)$", done.stdout, re.MULTILINE)
    bounds = ("the sleep bounds it", "the CPU bounds it", "round trips", "a larger share of a shared machine")
    assert any(bound in note for bound in bounds), note
    text = result.read_text()
    assert "**Command**: `python -m bench.hosts --jobs 200" in text and "| I/O-bound (sleep 10 ms) | 2 |" in text
