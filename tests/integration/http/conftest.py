"""The HTTP API in-process: an engine on a SQLite file of the test's own, the app over httpx's ASGI
transport, and keys of two tenants (``acme`` and ``globex``) with every scope."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from jobengine.core.clock import Clock
from jobengine.dashboard.session import COOKIE, csrf_token
from jobengine.engine import Engine
from jobengine.http import create_app
from jobengine.settings import Settings

ALL = ["admin"]


@dataclass
class Api:
    engine: Engine
    app: FastAPI
    keys: dict[str, str]  # tenant -> key text (admin)

    def client(self, key: str | None = None, tenant: str = "acme") -> httpx.AsyncClient:
        text = key if key is not None else self.keys[tenant]
        headers = {"Authorization": f"Bearer {text}"} if text else {}
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://api", headers=headers)

    async def key(self, tenant: str, *scopes: str) -> str:
        return (await self.engine.keys.create(tenant, list(scopes)))[1]

    async def session(self, key: str) -> str:
        """The token of a new dashboard session of ``key`` (what the login form puts in the cookie)."""
        found = await self.engine.keys.authenticate(key)
        assert found is not None
        return (await self.engine.keys.open_session(found))[1]


@asynccontextmanager
async def browser(api: Api, key: str | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """A client as a browser of the dashboard: a same-origin Origin and, with ``key``, the cookie of a
    session opened with it (the cookie is Secure, which httpx sends over https only: set by hand here)."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app), base_url="http://dash", headers={"Origin": "http://dash"}
    ) as client:
        if key is not None:
            client.cookies.set(COOKIE, await api.session(key))
        yield client


def form(client: httpx.AsyncClient, **fields: str) -> dict[str, str]:
    """A dashboard form's fields with the CSRF token of the client's session."""
    return {"csrf": csrf_token(client.cookies[COOKIE]), **fields}


def settings_for(tmp_path: Path, **overrides: object) -> Settings:
    base = Settings(database=str(tmp_path / "api.db"), claim_max_wait=2.0, sse_poll_interval=0.2)
    return replace(base, **overrides)  # type: ignore[arg-type]


MakeApi = Callable[..., AbstractAsyncContextManager[Api]]


@pytest.fixture
def make_api(tmp_path: Path) -> MakeApi:
    """``async with make_api(**settings) as api``: an engine (started) and its app, with other settings
    (``clock``: the engine's clock, for a test that moves time by hand)."""

    @asynccontextmanager
    async def make(clock: Clock | None = None, **overrides: object) -> AsyncIterator[Api]:
        settings = settings_for(tmp_path, **overrides)
        engine = Engine.from_settings(settings, clock)
        async with engine:
            keys = {t: (await engine.keys.create(t, ALL, f"{t} admin"))[1] for t in ("acme", "globex")}
            yield Api(engine, create_app(engine, settings), keys)

    return make


@pytest.fixture
async def api(make_api: MakeApi) -> AsyncIterator[Api]:
    async with make_api() as a:
        yield a


@pytest.fixture
async def acme(api: Api) -> AsyncIterator[httpx.AsyncClient]:
    async with api.client(tenant="acme") as c:
        yield c


@pytest.fixture
async def globex(api: Api) -> AsyncIterator[httpx.AsyncClient]:
    async with api.client(tenant="globex") as c:
        yield c
