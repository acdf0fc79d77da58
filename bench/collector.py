"""The collector: a thread in the benchmark process that reads the workers' datagrams.

It counts distinct completions and duplicates and keeps, per job number, the first ``(t, start)`` seen,
so the benchmark never has to ask the queue what ran.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from dataclasses import dataclass

from bench.workload import RECORD

_STOP = -1  # a datagram with this job number ends the reader thread


@dataclass(frozen=True, slots=True)
class Snapshot:
    distinct: int
    duplicates: int
    first_start: float | None
    last_start: float | None
    latencies: list[float]  # start - t, seconds, one per distinct job


class Collector:
    """Bind a fresh AF_UNIX datagram socket and read it in a daemon thread until :meth:`close`."""

    def __init__(self, directory: str | None = None) -> None:
        self._dir = tempfile.mkdtemp(prefix="jobengine-bench-sock-", dir=directory)
        self.path = os.path.join(self._dir, "collector.sock")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self._sock.bind(self.path)
        self._lock = threading.Lock()
        self._seen: dict[int, tuple[float, float]] = {}
        self._duplicates = 0
        self._target = 0
        self._reached = threading.Event()
        self._thread = threading.Thread(target=self._read, name="bench-collector", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        unpack, size = RECORD.unpack, RECORD.size
        recv = self._sock.recv
        while True:
            data = recv(64)
            if len(data) != size:
                continue
            i, t, start = unpack(data)
            if i == _STOP:
                return
            with self._lock:
                if i in self._seen:
                    self._duplicates += 1
                    continue
                self._seen[i] = (t, start)
                if self._target and len(self._seen) >= self._target:
                    self._reached.set()

    def wait_for(self, count: int, timeout: float) -> bool:
        """Block until ``count`` distinct jobs reported (True) or ``timeout`` seconds passed (False)."""
        with self._lock:
            self._target = count
            self._reached.clear()
            if len(self._seen) >= count:
                return True
        return self._reached.wait(timeout)

    def distinct(self) -> int:
        with self._lock:
            return len(self._seen)

    def snapshot(self, only: range | None = None) -> Snapshot:
        """The records so far; ``only`` restricts them to a range of job numbers (e.g. after a warm-up)."""
        with self._lock:
            items = [(i, r) for i, r in self._seen.items() if only is None or i in only]
            duplicates = self._duplicates
        starts = [start for _, (_, start) in items]
        return Snapshot(
            distinct=len(items),
            duplicates=duplicates,
            first_start=min(starts) if starts else None,
            last_start=max(starts) if starts else None,
            latencies=[start - t for _, (t, start) in items],
        )

    def close(self) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(RECORD.pack(_STOP, 0.0, 0.0), self.path)
        self._thread.join(timeout=5)
        self._sock.close()
        os.unlink(self.path)
        os.rmdir(self._dir)

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
