"""Enqueue throughput of the HTTP API under concurrent keep-alive clients: ``python -m bench.http_enqueue``.

One ``jobengine serve`` process at its defaults (a subprocess, as a user runs it) on a fresh store: a SQLite
file in a temp dir, or a new PostgreSQL database next to ``--dsn`` (dropped after). A client process drives
it with ``--clients`` (32) concurrent kept-alive connections, each sending one request after another:
``POST /api/v1/jobs`` (one job per request) and ``POST /api/v1/jobs/batch`` (``--batch`` jobs per request).
The client is a separate process speaking raw HTTP/1.1 on asyncio streams, so its cost stays small; its CPU
time is printed beside the server's so a client-bound figure shows itself.

Prints jobs/s, requests/s and p50 / p99 request latency per row, the cores each process used, and jobs per
second of the server's CPU (what the server costs per job, steadier than jobs/s on a shared machine);
``--out`` writes the table to a file.
``--profile DIR`` records the server with py-spy during each row (``DIR/<backend>-<endpoint>.txt``, collapsed
stacks).

Usage (from the project root)::

    .venv/bin/python -m bench.http_enqueue                                   # sqlite and postgres
    .venv/bin/python -m bench.http_enqueue --backends sqlite --seconds 5
    .venv/bin/python -m bench.http_enqueue --dsn postgresql://postgres@127.0.0.1/test --profile /tmp/prof
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.stores import fresh_store

ENDPOINTS = ("single", "batch")


@dataclass(frozen=True, slots=True)
class Row:
    backend: str
    endpoint: str
    jobs_per_s: float
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    server_cpu: float  # cores used by the server process during the timed window
    client_cpu: float  # cores used by the client process


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the client process ------------------------------------------------------------------------------------
async def _client(port: int, request: bytes, stop_at: float, latencies: list[float], counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while time.perf_counter() < stop_at:
            t = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - t)
            counts[0 if 200 <= status < 300 else 1] += 1
    finally:
        writer.close()


def _drive(port: int, request: bytes, clients: int, warmup: float, seconds: float, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    async def main() -> tuple[list[float], list[int], float, float]:
        # warm-up: connections opened, caches filled, nothing counted
        warm_latencies: list[float] = []
        warm_counts = [0, 0]
        end = time.perf_counter() + warmup
        await asyncio.gather(*(_client(port, request, end, warm_latencies, warm_counts) for _ in range(clients)))
        latencies: list[float] = []
        counts = [0, 0]
        cpu = time.process_time()
        start = time.perf_counter()
        await asyncio.gather(*(_client(port, request, start + seconds, latencies, counts) for _ in range(clients)))
        return latencies, counts, time.perf_counter() - start, time.process_time() - cpu

    out.put(asyncio.run(main()))


# -- the server ----------------------------------------------------------------------------------------------
def _serve(database: str, port: int, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = dict(os.environ)
    jobengine = str(Path(sys.executable).with_name("jobengine"))
    key_out = subprocess.run(
        [jobengine, "keys", "create", "--tenant", "bench", "--admin", "--name", "bench", "--json", "--db", database],
        env=env, check=True, capture_output=True,
    ).stdout  # fmt: skip
    key = json.loads(key_out)["key"]
    proc = subprocess.Popen(
        [jobengine, "serve", "--port", str(port), "--db", database],
        env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"jobengine serve exited ({proc.returncode}); see {log}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, key
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("jobengine serve did not start within 60 s")


def _request(port: int, key: str, endpoint: str, batch: int) -> bytes:
    if endpoint == "single":
        path, body = "/api/v1/jobs", b'{"task":"bench_noop","payload":{"i":1}}'
    else:
        jobs = ",".join(f'{{"task":"bench_noop","payload":{{"i":{i}}}}}' for i in range(batch))
        path, body = "/api/v1/jobs/batch", f'{{"jobs":[{jobs}]}}'.encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _row(backend: str, database: str, endpoint: str, args: argparse.Namespace, tmp: Path) -> Row:
    port = _free_port()
    proc, key = _serve(database, port, tmp / f"serve-{backend}-{endpoint}.log")
    try:
        request = _request(port, key, endpoint, args.batch)
        out: multiprocessing.Queue = multiprocessing.get_context("spawn").Queue()  # type: ignore[type-arg]
        client = multiprocessing.get_context("spawn").Process(
            target=_drive, args=(port, request, args.clients, args.warmup, args.seconds, out)
        )
        client.start()
        time.sleep(args.warmup)  # the client's warm-up; the server's CPU is read across the timed window
        spy = None
        if args.profile:
            Path(args.profile).mkdir(parents=True, exist_ok=True)
            target = Path(args.profile) / f"{backend}-{endpoint}.txt"
            spy = subprocess.Popen(
                [shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy")), "record", "-p",
                 str(proc.pid), "-d", str(int(args.seconds)), "-f", "raw", "-o", str(target), "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        cpu0 = _cpu_seconds(proc.pid)
        latencies, counts, elapsed, client_cpu = out.get(timeout=args.warmup + args.seconds + 120)
        cpu1 = _cpu_seconds(proc.pid)
        client.join(30)
        if spy is not None:
            spy.wait(60)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    per_request = 1 if endpoint == "single" else args.batch
    ms = sorted(x * 1000 for x in latencies)
    q = statistics.quantiles(ms, n=100) if len(ms) > 1 else [ms[0]] * 99
    return Row(
        backend, endpoint, counts[0] * per_request / elapsed, len(ms) / elapsed, statistics.median(ms), q[98],
        counts[1], (cpu1 - cpu0) / elapsed, client_cpu / elapsed,
    )  # fmt: skip


def _table(rows: list[Row]) -> str:
    lines = [
        f"{'backend':<9} {'endpoint':<8} {'jobs/s':>9} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6} "
        f"{'server cpu':>10} {'client cpu':>10} {'jobs/cpu-s':>10}"
    ]
    for r in rows:
        lines.append(
            f"{r.backend:<9} {r.endpoint:<8} {r.jobs_per_s:>9,.0f} {r.requests_per_s:>8,.0f} {r.p50_ms:>8.2f} "
            f"{r.p99_ms:>8.2f} {r.errors:>6} {r.server_cpu:>10.2f} {r.client_cpu:>10.2f} "
            f"{r.jobs_per_s / r.server_cpu if r.server_cpu else 0:>10,.0f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.http_enqueue", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres", help="comma-separated (default sqlite,postgres)")
    parser.add_argument("--endpoints", default="single,batch", help="comma-separated (default single,batch)")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1/test", help="PostgreSQL server to use")
    parser.add_argument("--clients", type=int, default=32, help="concurrent keep-alive connections (default 32)")
    parser.add_argument("--batch", type=int, default=100, help="jobs per batch request (default 100)")
    parser.add_argument("--seconds", type=float, default=10, help="timed seconds per row (default 10)")
    parser.add_argument("--warmup", type=float, default=2, help="untimed seconds before each row (default 2)")
    parser.add_argument("--tmpdir", default=None, help="where SQLite files go (default: the system temp dir)")
    parser.add_argument("--profile", default=None, help="py-spy record the server into this directory")
    parser.add_argument("--out", default=None, help="also write the table to this file")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            for endpoint in args.endpoints.split(","):
                if endpoint not in ENDPOINTS:
                    raise SystemExit(f"unknown endpoint {endpoint!r}")
                store = fresh_store(backend, args.dsn, args.tmpdir)
                try:
                    rows.append(_row(backend, store.database, endpoint, args, Path(tmp)))
                finally:
                    store.cleanup()
                print(_table(rows[-1:]).splitlines()[1], file=sys.stderr)
    text = _table(rows)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
