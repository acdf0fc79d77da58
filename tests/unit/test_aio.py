"""jobengine.aio: the helpers for code called both on an event loop and off it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from jobengine.aio import CallThread, TurnBatch, call_on, running_loop


async def test_on_its_loop_a_call_runs_at_once_and_from_another_thread_at_the_loops_next_turn() -> None:
    loop = asyncio.get_running_loop()
    ran: list[tuple[str, bool]] = []

    def mark(who: str) -> None:
        ran.append((who, running_loop() is loop))

    call_on(loop, mark, "here")
    assert ran == [("here", True)]
    thread = threading.Thread(target=call_on, args=(loop, mark, "there"))
    thread.start()
    thread.join()
    assert ran == [("here", True)]  # handed over, not run in the other thread
    await asyncio.sleep(0)
    assert ran == [("here", True), ("there", True)]


def test_with_no_open_loop_to_hand_it_to_a_call_runs_at_once() -> None:
    ran: list[str] = []
    call_on(None, ran.append, "none")
    closed = asyncio.new_event_loop()
    closed.close()
    call_on(closed, ran.append, "closed")
    assert ran == ["none", "closed"]


async def test_a_turns_items_are_written_together_at_the_next_turn_and_off_a_loop_at_once() -> None:
    writes: list[list[str]] = []
    batch: TurnBatch[str] = TurnBatch(writes.append)
    batch.add("a")
    batch.add("b")
    assert writes == [] and batch
    await asyncio.sleep(0)
    assert writes == [["a", "b"]] and not batch
    batch.add("c")
    thread = threading.Thread(target=batch.add, args=("d",))  # no loop there: written at once, after "c"
    thread.start()
    thread.join()
    assert writes == [["a", "b"], ["c", "d"]]
    await asyncio.sleep(0)  # the turn finds nothing left
    assert writes == [["a", "b"], ["c", "d"]]


async def test_a_failed_write_at_the_turn_goes_to_on_error_and_a_flush_raises_to_its_caller() -> None:
    errors: list[str] = []

    def fail(items: list[int]) -> None:
        raise OSError("the stream is gone")

    batch: TurnBatch[int] = TurnBatch(fail, on_error=lambda: errors.append("reported"))
    batch.add(1)
    await asyncio.sleep(0)
    assert errors == ["reported"] and not batch
    batch.add(2)
    with pytest.raises(OSError):
        batch.flush()


async def test_a_call_thread_runs_calls_in_order_on_its_thread_and_answers_each_on_its_callers_loop() -> None:
    calls = CallThread("test-calls")
    seen: list[tuple[int, str]] = []

    def note(k: int) -> int:
        seen.append((k, threading.current_thread().name))
        return k * 10

    def boom() -> None:
        raise KeyError("boom")

    try:
        answers = await asyncio.gather(*(calls.submit(note, k) for k in range(5)))
        assert answers == [0, 10, 20, 30, 40]
        assert seen == [(k, "test-calls") for k in range(5)]
        with pytest.raises(KeyError, match="boom"):
            await calls.submit(boom)
        with pytest.raises(RuntimeError, match="StopIteration"):
            await calls.submit(next, iter(()))

        # A caller on another loop, in another thread, is answered there.
        def elsewhere() -> int:
            return asyncio.run(_submitted(calls, note, 7))

        assert await asyncio.get_running_loop().run_in_executor(None, elsewhere) == 70
    finally:
        calls.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        calls.submit(note, 9)
    assert [k for k, _ in seen] == [0, 1, 2, 3, 4, 7]


async def _submitted(calls: CallThread, fn: Callable[[int], int], arg: int) -> int:
    return await calls.submit(fn, arg)


async def test_a_call_cancelled_before_the_thread_takes_it_never_runs() -> None:
    calls = CallThread("test-calls")
    gate = threading.Event()
    ran: list[str] = []
    try:
        first = calls.submit(gate.wait, 60.0)  # holds the thread
        second = calls.submit(ran.append, "second")
        second.cancel()
        third = calls.submit(ran.append, "third")
        gate.set()
        assert await first is True
        await third
        assert second.cancelled()
        assert ran == ["third"]
    finally:
        calls.shutdown()
