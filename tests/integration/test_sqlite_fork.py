"""A SQLite store used before a ``fork()`` serves the child with a thread and connections of its own (a
preloading server, a ``multiprocessing`` pool), and the parent's store goes on."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path

from jobengine.backends.sqlite import SqliteStore
from jobengine.core.models import NewJob


def _exit_status_of(pid: int, within: float) -> int:
    """The child's exit code once it ends: its pidfd turns readable then."""
    fd = os.pidfd_open(pid)
    try:
        ended, _, _ = select.select([fd], [], [], within)
    finally:
        os.close(fd)
    if not ended:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError(f"the child did not finish within {within:g} s (its store calls hung)")
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_store_used_before_a_fork_serves_the_child_and_goes_on_in_the_parent(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "jobs.db"))
    notifier = store.notifier()

    async def before() -> None:
        await store.migrate()
        await store.insert_jobs([NewJob("t")], time.time(), [()])  # the store thread and connection exist
        await notifier.wait(0.01)  # so do the notifier's event and poller, on this loop

    asyncio.run(before())
    in_child = NewJob("t")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # newer Pythons warn of fork() with threads
        pid = os.fork()
    if pid == 0:  # the child reports by its exit code alone
        code = 1
        try:

            async def child() -> None:
                async with asyncio.timeout(30):
                    await store.insert_jobs([in_child], time.time(), [()])
                    assert [j.id for j in await store.get_jobs([in_child.id])] == [in_child.id]
                    notifier.notify()
                    assert await notifier.wait(5.0)
                    await notifier.close()
                    await store.close()

            asyncio.run(child())
            code = 0
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(code)

    assert _exit_status_of(pid, 120) == 0

    async def after() -> None:
        try:
            assert [j.id for j in await store.get_jobs([in_child.id])] == [in_child.id]  # the child's commit
            await store.insert_jobs([NewJob("t")], time.time(), [()])
            assert await notifier.wait(5.0)  # the parent's notifier still hears commits (the child's, its own)
        finally:
            await notifier.close()
            await store.close()

    asyncio.run(after())
