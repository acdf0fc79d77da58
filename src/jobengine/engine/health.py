"""Readiness of this process (``engine.health``): the store, the queue transports and the checks that the
services of this process register (runner, planner, webhooks, pack storage)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from jobengine.ports.store import Store
from jobengine.ports.transport import Health as TransportHealth

#: A readiness check: a short status text, or an exception when the part it checks is not ready.
HealthCheck = Callable[[], Awaitable[str]]


class Health:
    """Readiness checks by name, run together by :meth:`readiness` (what ``/readyz`` answers).

    ``transports`` answers the queue transports' health (one round trip each).

    Usage::

        engine.health.add("cache", check_cache)   # async () -> "ok", raises when not ready
        ready = all(ok for ok, _ in (await engine.health.readiness()).values())
    """

    def __init__(self, store: Store, transports: Callable[[], Awaitable[Sequence[TransportHealth]]]) -> None:
        self._store = store
        self._transports = transports
        self._checks: dict[str, HealthCheck] = {}

    def add(self, name: str, check: HealthCheck) -> None:
        """Register a readiness check (a service of this process: runner, planner, a transport); it returns
        a short status text, or raises when the part is not ready."""
        self._checks[name] = check

    def remove(self, name: str) -> None:
        """Forget the check ``name`` (nothing if there is none)."""
        self._checks.pop(name, None)

    async def readiness(self, timeout: float = 2.0) -> dict[str, tuple[bool, str]]:
        """Every check's (ready, detail): the store (a read), each queue transport (planner, runner: one
        round trip each) and the checks services of this process registered."""
        results: dict[str, tuple[bool, str]] = {}

        async def run(name: str, check: HealthCheck) -> None:
            try:
                async with asyncio.timeout(timeout):
                    results[name] = (True, await check())
            except Exception as exc:
                results[name] = (False, f"{type(exc).__name__}: {exc}"[:300])

        async def store() -> str:
            await self._store.list_events(2**62, 1)  # an index probe: proves a connection and the schema
            return "ok"

        checks = {"store": store, **self._checks}
        try:
            async with asyncio.timeout(timeout):
                for h in await self._transports():
                    detail = f"{h.transport}, {h.latency_ms:.1f} ms" + (f": {h.detail}" if h.detail else "")
                    results[f"transport:{h.queue}"] = (bool(h.ok), detail)
        except Exception as exc:
            results["transport"] = (False, f"{type(exc).__name__}: {exc}"[:300])
        await asyncio.gather(*(run(n, c) for n, c in checks.items()))
        return dict(sorted(results.items()))
