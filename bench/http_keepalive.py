"""Per-request latency of the HTTP API on a kept-alive connection and on a new connection per request:
``python -m bench.http_keepalive``.

A server (``ApiService``, the one ``jobengine serve`` runs) on a SQLite file in a temp dir, on 127.0.0.1;
one client at a time, one request after another, from ``http.client`` and ``httpx`` (sync), for
``POST /api/v1/jobs`` and ``GET /api/v1/jobs?limit=10``. A kept-alive connection should answer at least as
fast as a new one: a kept-alive figure tens of milliseconds above the new-connection one is a response
held back by Nagle's algorithm waiting for the client's delayed ACK.

Usage (from the project root)::

    .venv/bin/python -m bench.http_keepalive                 # 200 requests per row
    .venv/bin/python -m bench.http_keepalive --requests 1000
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from jobengine.engine import Engine
from jobengine.http.server import ApiService
from jobengine.settings import Settings

Request = Callable[[], None]


def _http_client(port: int, key: str, method: str, path: str, body: bytes | None, keep: bool) -> Request:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def once() -> None:
        nonlocal conn
        if not keep:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {response.status}")
        if not keep:
            conn.close()

    return once


def _httpx(port: int, key: str, method: str, path: str, body: bytes | None, keep: bool) -> Request:
    # One client either way; without keep-alive its pool closes each connection after its response.
    limits = httpx.Limits(max_keepalive_connections=None if keep else 0)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, limits=limits, timeout=60)

    def once() -> None:
        client.request(method, path, content=body).raise_for_status()

    return once


def _measure(request: Request, n: int) -> list[float]:
    request()  # opens the kept-alive connection outside the timing
    times = []
    for _ in range(n):
        t = time.perf_counter()
        request()
        times.append((time.perf_counter() - t) * 1000)
    return times


async def _run(n: int) -> list[tuple[str, str, str, list[float]]]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database=str(Path(tmp) / "bench.db"))
        engine = Engine.from_settings(settings)
        async with engine:
            key = (await engine.keys.create("bench", ["admin"], "bench"))[1]
            service = ApiService(engine, settings, host="127.0.0.1", port=0)
            await service.start()
            rows = []
            try:
                for client_name, make in (("http.client", _http_client), ("httpx", _httpx)):
                    for method, path, body in (
                        ("POST", "/api/v1/jobs", b'{"task": "bench_noop"}'),
                        ("GET", "/api/v1/jobs?limit=10", None),
                    ):
                        for keep in (True, False):
                            request = make(service.port, key, method, path, body, keep)
                            times = await asyncio.to_thread(_measure, request, n)
                            rows.append((client_name, f"{method} {path}", "kept-alive" if keep else "new", times))
            finally:
                await service.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.http_keepalive", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="timed requests per row (default 200)")
    args = parser.parse_args(argv)
    rows = asyncio.run(_run(args.requests))
    print(f"{'client':<12} {'request':<26} {'connection':<11} {'p50 ms':>8} {'p90 ms':>8} {'max ms':>8}")
    for client_name, request, connection, times in rows:
        q = statistics.quantiles(times, n=10)
        print(
            f"{client_name:<12} {request:<26} {connection:<11} "
            f"{statistics.median(times):>8.2f} {q[8]:>8.2f} {max(times):>8.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
