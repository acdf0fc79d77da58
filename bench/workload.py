"""The standard job: a no-op task that receives ``(i, t)`` and reports ``(i, t, now)`` in one record.

The benchmark process (the producer) and every worker process build their engine through
:func:`make_engine`, so they register the same task with the same defaults. The task body costs the same
for every system being compared: one ``send`` of a 24-byte record on a connected AF_UNIX stream socket.
Not a datagram socket: Linux queues at most ``net.unix.max_dgram_qlen`` (10 by default) datagrams for a
receiver, so a collector that lags by a few milliseconds (its thread waiting for the producer's GIL) blocks
every worker in its ``send``; a stream socket's buffer holds thousands of records.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from dataclasses import replace
from typing import Any

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

    def connect(self, path: str) -> None:
        self.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        self._sock = sock

    def send(self, i: int, t: float) -> None:
        now = time.time()
        if self._sock is None:
            raise RuntimeError("the benchmark sink is not connected")
        # Blocking on purpose: nothing is dropped, the sender waits for buffer space. A record is one write of
        # 24 bytes, which processes sharing the socket (a forking worker's children) never interleave.
        self._sock.sendall(RECORD.pack(i, t, now))

    def close(self) -> None:
        if self._sock is not None:
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
