"""The dashboard's pure parts on `database: memory`: the event recorder behind the charts, the shared count
cache, the formatting filters, the CSRF token and the login redirect guard."""

from __future__ import annotations

import time

from jobengine.core.ids import WorkerId
from jobengine.core.models import AttemptError, Completion, FailOutcome, Failure
from jobengine.dashboard.render import ago, duration, percent, sparkline
from jobengine.dashboard.session import csrf_token, safe_next
from jobengine.dashboard.stats import BUCKET_SECONDS, BUCKETS, Recorder
from jobengine.engine import Engine
from jobengine.engine.compose import open_store


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_recorder_counts_enqueued_succeeded_and_failed_per_minute_and_tenant() -> None:
    async with Engine(open_store("memory")) as engine:
        clock = Clock(time.time())
        recorder = Recorder(engine, clock)
        await engine.enqueue_many([engine.new_job("t", {"i": i}, tenant="acme") for i in range(3)])
        await engine.enqueue("t", tenant="globex")
        claimed = await engine.transitions.fetch_jobs(["default"], 10, WorkerId("w"), 30)
        acme = [j for j in claimed if j.tenant == "acme"]
        assert acme[0].lease_token and acme[1].lease_token
        await engine.transitions.complete_jobs([Completion(acme[0].id, acme[0].lease_token)])
        error = AttemptError(1, time.time(), "ValueError", "no")
        await engine.transitions.fail_jobs([Failure(acme[1].id, acme[1].lease_token, error, FailOutcome.DEAD)])
        await recorder.pull()
        series = recorder.series("acme")
        assert len(series["t"]) == BUCKETS and series["t"][-1] == (clock.now // BUCKET_SECONDS) * BUCKET_SECONDS
        assert (sum(series["enqueued"]), sum(series["succeeded"]), sum(series["failed"])) == (3, 1, 1)
        assert sum(recorder.series("globex")["enqueued"]) == 1
        assert sum(recorder.series("nobody")["enqueued"]) == 0
        await recorder.pull()  # reads only what is new: nothing is counted twice
        assert sum(recorder.series("acme")["enqueued"]) == 3
        clock.now += BUCKET_SECONDS * (BUCKETS + 1)  # an hour later the buckets have aged out
        await recorder.pull()
        assert sum(recorder.series("acme")["enqueued"]) == 0


def test_filters() -> None:
    assert ago(100.0, now=112.0) == "12.0 s ago" and ago(200.0, now=100.0) == "in 100.0 s"
    assert duration(0.25) == "250 ms" and duration(3600) == "60 min" and duration(None) == "—"
    assert percent(0.5) == "50%" and percent(1.7) == "100%" and percent(None) == "0%"
    svg = str(sparkline([0, 2, 1]))
    assert svg.startswith("<svg") and 'aria-label="occurrences over time: 0, 2, 1"' in svg
    assert str(sparkline([])) == ""


def test_csrf_token_is_bound_to_the_key_and_next_stays_on_the_site() -> None:
    assert csrf_token("je_a") == csrf_token("je_a") != csrf_token("je_b")
    assert len(csrf_token("je_a")) == 64
    for bad in (None, "", "https://evil.example", "//evil.example", "/\\evil.example", "jobs"):
        assert safe_next(bad) == "/"
    assert safe_next("/jobs?state=dead") == "/jobs?state=dead"
