"""jobengine.aio: the helpers for code called both on an event loop and off it."""

from __future__ import annotations

import asyncio
import threading

from jobengine.aio import call_on, running_loop


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
