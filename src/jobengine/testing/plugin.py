"""The pytest plugin of :mod:`jobengine.testing`, registered under ``pytest11`` in jobengine's package
metadata, so pytest loads it wherever jobengine is installed. It imports jobengine only when a test asks for
its fixture, so a test run that does not use it pays nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from jobengine.engine import Engine
    from jobengine.testing.mode import TestEngine


@pytest.fixture
def jobengine_testing() -> Iterator[Callable[[Engine], TestEngine]]:
    """Put an engine in test mode until the test ends: ``t = jobengine_testing(engine)`` is a
    :class:`~jobengine.testing.TestEngine` already entered (its jobs run on ``t.drain_sync()`` or
    ``await t.drain()``); the engine is put back as it was at teardown, whatever the test did. Usage::

        from myapp.jobs import engine, send_welcome

        def test_send_welcome(jobengine_testing) -> None:
            t = jobengine_testing(engine)
            handle = send_welcome.enqueue_sync("ada@example.com")
            t.drain_sync()
            assert handle.result_sync() == "sent to ada@example.com"
    """
    from jobengine.testing.mode import TestEngine

    entered: list[TestEngine] = []

    def enter(engine: Engine) -> TestEngine:
        t = TestEngine(engine)
        t.__enter__()
        entered.append(t)
        return t

    yield enter
    errors = []
    for t in reversed(entered):
        try:
            t.__exit__(None, None, None)
        except Exception as exc:  # every engine is put back; the first failure is reported
            errors.append(exc)
    if errors:
        raise errors[0]
