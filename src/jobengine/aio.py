"""Small asyncio helpers shared by every layer (this module imports nothing of jobengine's)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


_FORKS = [0]
os.register_at_fork(after_in_child=lambda: _FORKS.__setitem__(0, _FORKS[0] + 1))


def forks() -> int:
    """How many forks led to this process since jobengine was imported: 0 in the process that imported it,
    one more in each child forked from it. What was made before a fork (a thread, a connection) belongs to
    the parent: an object that notes this number when it makes one tells a child by it."""
    return _FORKS[0]


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, or None (a plain thread, a sync caller): for code that is called
    both on a loop and off it and must tell which."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def call_on(loop: asyncio.AbstractEventLoop | None, fn: Callable[..., Any], *args: Any) -> None:
    """``fn(*args)`` on ``loop``: now when this thread is running it (or there is no open loop to hand it to),
    else handed to it thread-safely, to run at its next turn. For objects of one loop (an ``asyncio.Event``,
    a task) that other threads must reach: a sync facade's thread, a task's executor thread."""
    if loop is None or loop.is_closed() or running_loop() is loop:
        fn(*args)
    else:
        loop.call_soon_threadsafe(fn, *args)


class TurnBatch(Generic[T]):
    """Items added on a running event loop, handed to ``write`` together at the loop's next turn: one write
    (one system call) for all that the turn produced, instead of one per item, and none between the steps of
    the code that adds them. An item added off a loop is written at once, after those still waiting.
    ``lock`` (re-entrant: ``write`` may be reached from code that holds it) keeps the items of concurrent
    threads and their writes in order. ``on_error``: what a failed write at the loop's turn does instead of
    raising into the loop; a write from :meth:`add` off a loop or from :meth:`flush` raises to its caller."""

    def __init__(
        self,
        write: Callable[[list[T]], None],
        lock: threading.RLock | None = None,
        on_error: Callable[[], None] | None = None,
    ) -> None:
        self._write = write
        self._lock = lock if lock is not None else threading.RLock()
        self._on_error = on_error
        self._items: list[T] = []
        self._turn_of: asyncio.AbstractEventLoop | None = None  # the loop whose next turn writes them

    def __bool__(self) -> bool:
        """Whether items wait."""
        return bool(self._items)

    def add(self, item: T) -> None:
        loop = running_loop()
        with self._lock:
            self._items.append(item)
            if loop is None:
                self.flush()
            elif self._turn_of is not loop:  # a loop that closed first leaves them to the next add or flush
                self._turn_of = loop
                loop.call_soon(self._at_turn)

    def flush(self) -> None:
        """Write the waiting items now."""
        with self._lock:
            items, self._items, self._turn_of = self._items, [], None
            if items:
                self._write(items)

    def _at_turn(self) -> None:
        try:
            self.flush()
        except Exception:
            if self._on_error is None:
                raise
            self._on_error()


class CallThread:
    """Runs functions one at a time on a thread of its own, answering each caller on its own event loop: what
    ``loop.run_in_executor`` on a one-thread pool does, without the pool's future and the chaining of it to
    an asyncio one, which cost a store that makes a call per operation more than its own Python does.

    As with the pool, a call whose future is cancelled before the thread takes it is skipped, one that has
    started runs to its end, and :meth:`submit` after :meth:`shutdown` raises RuntimeError. The thread is a
    daemon: a process that never shuts it down still exits, leaving unrun what it had not taken (no caller
    was answered for those). A forked child, which has no copy of the thread, gets a thread of its own at
    its first call."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._calls: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._shut = False
        self._fork = forks()

    def submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        if self._fork != forks():  # the thread and what it had queued are the parent's
            self._calls, self._lock, self._thread, self._fork = queue.SimpleQueue(), threading.Lock(), None, forks()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._shut:
                raise RuntimeError(f"{self._name}: cannot run calls after shutdown")
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                self._thread.start()
            self._calls.put((loop, future, fn, args))
        return future

    def shutdown(self) -> None:
        """Refuse new calls; the thread ends after those already submitted. Waits for it."""
        with self._lock:
            self._shut, thread = True, self._thread
            self._calls.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            loop, future, fn, args = call
            del call
            if future.cancelled():
                continue
            answer: Callable[[asyncio.Future[Any], Any], None] = _settle
            try:
                value = fn(*args)
            except BaseException as exc:
                answer, value = _fail, exc
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed: no one is waiting
                loop.call_soon_threadsafe(answer, future, value)
            del loop, future, fn, args, value


def _settle(future: asyncio.Future[Any], value: Any) -> None:
    if not future.cancelled():
        future.set_result(value)


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.cancelled():
        if isinstance(exc, StopIteration):  # a future refuses it (it would end the awaiting coroutine)
            stopped = RuntimeError("the call raised StopIteration")  # as asyncio's tasks turn it
            stopped.__cause__, exc = exc, stopped
        future.set_exception(exc)
