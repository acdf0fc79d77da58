"""The standard job: a no-op task that receives ``(i, t)`` and reports ``(i, t, now)`` in one record.

The benchmark process (the producer) and every worker process build their engine through
:func:`make_engine`, so they register the same task with the same defaults. The task body costs the same
for every system being compared: a 24-byte record stamped with the job's start, written on a connected
AF_UNIX stream socket. Not a datagram socket: Linux queues at most ``net.unix.max_dgram_qlen`` (10 by
default) datagrams for a receiver, so a collector that lags by a few milliseconds (its thread waiting for the
producer's GIL) blocks every worker in its ``send``; a stream socket's buffer holds thousands of records.

In a running event loop the records of one turn of the loop go out in one write at its next turn (off a
loop, each record is its own write). A write per job cost a worker a system call and a wake-up of the
collector's thread per job, which weighed more on small batches than on large ones: a worker that runs 50
jobs a turn paid more per job than one that runs 300, a cost of the measurement, not of the system measured.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from dataclasses import replace
from typing import Any

from jobengine.aio import TurnBatch
from jobengine.core.queue_config import QueueConfig
from jobengine.engine import Engine
from jobengine.settings import Settings

TASK = "bench_noop"
#: One record: job number, enqueue-call time, start time of the job body (UNIX seconds).
RECORD = struct.Struct("<qdd")


class Sink:
    """Where the task body reports to. Unconnected in the producer (it never runs the task)."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        #: Records of a loop's turn, written together at its next turn; off a loop each at once (a forking
        #: worker's children share the socket: a write of one record is never interleaved with theirs).
        self._records: TurnBatch[bytes] = TurnBatch(self._write)

    def connect(self, path: str) -> None:
        self.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        self._sock = sock

    def send(self, i: int, t: float) -> None:
        now = time.time()
        if self._sock is None:
            raise RuntimeError("the benchmark sink is not connected")
        self._records.add(RECORD.pack(i, t, now))

    def _write(self, records: list[bytes]) -> None:
        """Blocking on purpose: nothing is dropped, the sender waits for buffer space."""
        if self._sock is not None:
            self._sock.sendall(b"".join(records))

    def close(self) -> None:
        if self._sock is not None:
            self._records.flush()
            self._sock.close()
            self._sock = None


def make_engine(database: str, synchronous: str = "FULL", queue: str | None = None) -> tuple[Engine, Sink]:
    """An engine on ``database`` with the benchmark task registered; the sink its body reports to.
    ``queue``: the ``queue:`` settings as JSON (``--transport``, see bench/transports.py)."""
    settings = Settings(database=database, sqlite_synchronous=synchronous)
    if queue:
        settings = replace(settings, queue=QueueConfig.load(json.loads(queue)))
    engine = Engine.from_settings(settings)
    sink = Sink()

    @engine.task(name=TASK)
    async def bench_noop(ctx: Any) -> None:
        payload = ctx.payload
        sink.send(payload["i"], payload["t"])

    return engine, sink


def payload(i: int) -> dict[str, Any]:
    """The job arguments, stamped with the time of the enqueue call."""
    return {"i": i, "t": time.time()}
