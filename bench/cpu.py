"""CPU seconds of the processes a phase measures, read from ``/proc`` (Linux), steadier than a rate on a busy
machine: the worker processes, and for PostgreSQL the server backends that serve them.

The producer's own backends (open before the workers start, and polling the store to see it drained) are left
out: only backends of the benchmark's database that appeared after the workers were launched are counted.
"""

from __future__ import annotations

import os

CLOCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far; 0 once it exited (or where there is no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK


def postgres_backends(dsn: str) -> set[int]:
    """The pids of the server backends connected to the database of ``dsn`` (this query's own left out)."""
    from bench.postgres import connect

    with connect(dsn) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return {int(r[0]) for r in rows}
