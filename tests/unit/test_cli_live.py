"""The live view of ``jobengine up``: columns that never run into each other, progress as a percentage,
and repeated progress collapsed (rewritten in place on a terminal, thinned out in a log)."""

from __future__ import annotations

import io
import time

from rich.console import Console

from jobengine.cli.live import LiveView
from jobengine.cli.output import TASK_WIDTH, TYPE_WIDTH, column, event_line
from jobengine.core.ids import JobId
from jobengine.core.models import Event, Json
from jobengine.engine import Engine
from jobengine.engine.compose import open_store

JOB = JobId("0190f0e2-7c4a-7001-8000-00000000abcd")


def event(type_: str, task: str | None = "hello", **data: Json) -> Event:
    return Event(1, time.time(), type_, "default", JOB, "default", task, data)


def progress(fraction: float, phase: str = "transform", index: int = 1) -> Event:
    data: dict[str, Json] = {"phase_event": "phase.progress", "phase": phase, "index": index,
                             "progress": fraction, "job_progress": (index + fraction) / 3, "message": ""}  # fmt: skip
    return Event(1, time.time(), "job.phase", "default", JOB, "default", "etl", data)


def test_columns_keep_their_width_and_a_space_between() -> None:
    text = event_line(event("schedule.created", "hello")).plain
    assert "schedule.created  hello" in text  # was 'schedule.createdhello'
    long = event_line(event("webhook.endpoint_disabled", "a-very-long-task-name-indeed")).plain
    assert "webhook.endpoint…" in long and "a-very-long-t…" in long
    assert len(column("x" * 40, TYPE_WIDTH)) == TYPE_WIDTH and len(column("ab", TASK_WIDTH)) == TASK_WIDTH


def test_a_progress_line_says_the_phase_percentage_and_the_jobs() -> None:
    text = event_line(progress(0.6666666666666666), 3).plain
    assert "phase 2/3 transform 67%" in text
    assert "56%" in text  # the job: (1 + 2/3) / 3
    assert "progress" not in text.split("transform", 1)[1]


def live(terminal: bool) -> tuple[LiveView, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=200, color_system=None if not terminal else "standard")
    return LiveView(Engine(open_store("memory")), console), out


def test_in_a_log_repeated_progress_is_thinned_to_steps_of_ten_points() -> None:
    view, out = live(terminal=False)
    view._print(event("job.started", "etl"))
    for i in range(1, 41):  # saved every 2.5 points
        view._print(progress(i / 40))
    view._print(event("job.succeeded", "etl"))
    lines = out.getvalue().splitlines()
    shown = [line for line in lines if "transform" in line]
    assert 5 <= len(shown) <= 11, shown
    assert "transform 100%" in shown[-1]
    assert "succeeded" in lines[-1]


def test_on_a_terminal_progress_rewrites_its_line_in_place() -> None:
    view, out = live(terminal=True)
    view._print(event("job.started", "etl"))
    for i in range(1, 11):
        view._print(progress(i / 10))
    view._print(progress(0.5, "upload", 2))  # another phase: a line of its own
    view._print(event("job.succeeded", "etl"))
    text = out.getvalue()
    assert text.count("\x1b[1A") == 9  # the nine progress lines after the first replaced the one before
    # Lines left on the screen: started, transform (rewritten nine times), upload, succeeded.
    assert text.count("\n") - text.count("\x1b[1A") == 4
    assert "transform 100%" in text
