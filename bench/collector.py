"""The collector: a thread in the benchmark process that reads the workers' records (bench.workload.Sink).

It counts distinct completions and duplicates and keeps, per job number, the first ``(t, start)`` seen,
so the benchmark never has to ask the queue what ran.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import tempfile
import threading
from dataclasses import dataclass

from bench.workload import RECORD

_STOP = -1  # a record with this job number ends the reader thread


@dataclass(frozen=True, slots=True)
class Snapshot:
    distinct: int
    duplicates: int
    first_start: float | None
    last_start: float | None
    latencies: list[float]  # start - t, seconds, one per distinct job


class Collector:
    """Listen on a fresh AF_UNIX stream socket and read every connection in a daemon thread until :meth:`close`."""

    def __init__(self, directory: str | None = None) -> None:
        self._dir = tempfile.mkdtemp(prefix="jobengine-bench-sock-", dir=directory)
        self.path = os.path.join(self._dir, "collector.sock")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(self.path)
        self._sock.listen(128)
        self._sock.setblocking(False)
        self._lock = threading.Lock()
        self._seen: dict[int, tuple[float, float]] = {}
        self._duplicates = 0
        self._target = 0
        self._reached = threading.Event()
        self._thread = threading.Thread(target=self._read, name="bench-collector", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        """Accept every sink's connection and read its records until one says stop."""
        size = RECORD.size
        selector = selectors.DefaultSelector()
        selector.register(self._sock, selectors.EVENT_READ)
        rest: dict[socket.socket, bytes] = {}
        try:
            while True:
                for key, _ in selector.select():
                    conn = key.fileobj
                    assert isinstance(conn, socket.socket)
                    if conn is self._sock:
                        with contextlib.suppress(BlockingIOError):
                            new, _ = conn.accept()
                            new.setblocking(False)
                            selector.register(new, selectors.EVENT_READ)
                            rest[new] = b""
                        continue
                    try:
                        data = conn.recv(1 << 16)
                    except BlockingIOError:
                        continue
                    if not data:  # that sink closed
                        selector.unregister(conn)
                        conn.close()
                        del rest[conn]
                        continue
                    data = rest[conn] + data
                    whole = len(data) - len(data) % size
                    rest[conn] = data[whole:]
                    if self._take(data[:whole]):
                        return
        finally:
            for conn in rest:
                conn.close()
            selector.close()

    def _take(self, data: bytes) -> bool:
        """Record whole records; True at the stop record."""
        with self._lock:
            seen = self._seen
            for i, t, start in RECORD.iter_unpack(data):
                if i == _STOP:
                    return True
                if i in seen:
                    self._duplicates += 1
                    continue
                seen[i] = (t, start)
            if self._target and len(seen) >= self._target:
                self._reached.set()
        return False

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
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(self.path)
            s.sendall(RECORD.pack(_STOP, 0.0, 0.0))
        self._thread.join(timeout=5)
        self._sock.close()
        os.unlink(self.path)
        os.rmdir(self._dir)

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
