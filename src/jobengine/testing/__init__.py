"""Testing an app's tasks: test mode for the app's own engine, and a context for calling a task directly.

- :class:`TestEngine`: ``with TestEngine(engine) as t:`` (or ``async with``) puts the app's ``engine`` on a
  temporary SQLite store; enqueued jobs wait until ``t.drain()`` / ``t.drain_sync()`` runs them in this
  process with the real worker (phases, retries, dependencies, dead jobs), with no service and no worker
  process.
- :func:`context`: a :class:`TestContext` to pass to a task function called directly, recording its
  progress and checkpoints and giving it earlier phases' results.
- The ``jobengine_testing`` pytest fixture (a plugin pytest loads by itself once jobengine is installed):
  ``t = jobengine_testing(engine)`` is a :class:`TestEngine` entered until the test ends.

Usage::

    from jobengine import testing
    from myapp.jobs import engine, send_welcome

    def test_send_welcome(jobengine_testing) -> None:
        t = jobengine_testing(engine)
        handle = send_welcome.enqueue_sync("ada@example.com")
        t.drain_sync()
        assert handle.result_sync() == "sent to ada@example.com"

    async def test_send_welcome_reports_progress() -> None:
        ctx = testing.context()
        await send_welcome(ctx, "ada@example.com")
        assert ctx.progress_reports == [(0.5, "rendering")]
"""

from jobengine.testing.context import TestContext, context
from jobengine.testing.mode import TestEngine

__all__ = ["TestContext", "TestEngine", "context"]
