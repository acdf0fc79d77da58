"""Webhook tests: an engine on a SQLite file of the test's own with short webhook intervals, its
dispatcher, and real receivers on loopback (allowed through ``webhook_allow_hosts``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.webhooks.dispatcher import WebhookDispatcher
from tests.support.webhook_receiver import Answer, Receiver

FAST = {
    "webhook_allow_hosts": ("127.0.0.1/32",),
    "webhook_retry_base": 0.2,
    "webhook_retry_jitter": 0.0,
    "webhook_poll_interval": 0.05,
    "webhook_timeout": 2.0,
}


def webhook_settings(database: str, **overrides: object) -> Settings:
    return replace(Settings(database=database), **{**FAST, **overrides})  # type: ignore[arg-type]


MakeEngine = Callable[..., AbstractAsyncContextManager[Engine]]


@pytest.fixture
def make_engine(tmp_path: Path) -> MakeEngine:
    @asynccontextmanager
    async def make(**overrides: object) -> AsyncIterator[Engine]:
        database = str(overrides.pop("database", tmp_path / "hooks.db"))
        async with Engine.from_settings(webhook_settings(database, **overrides)) as engine:
            yield engine

    return make


@asynccontextmanager
async def dispatching(engine: Engine) -> AsyncIterator[WebhookDispatcher]:
    dispatcher = WebhookDispatcher(engine)
    await dispatcher.start()
    try:
        yield dispatcher
    finally:
        await dispatcher.stop()


@pytest.fixture
def receiver() -> Iterator[Callable[[Answer], Receiver]]:
    made: list[Receiver] = []

    def make(answer: Answer = lambda n, r: (200, {})) -> Receiver:
        r = Receiver(answer)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()
