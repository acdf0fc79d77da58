"""The short id form tells apart jobs made together and is a prefix of the id."""

from __future__ import annotations

from jobengine.cli import output
from jobengine.core.ids import new_job_id, prefix_range, short_id


def test_ids_made_in_one_burst_have_distinct_short_forms() -> None:
    ids = [new_job_id() for _ in range(1000)]  # many share a millisecond, and so their random part
    assert len({i[-12:] for i in ids}) < len(ids)  # why the tail alone does not do
    shorts = [short_id(i) for i in ids]
    assert len(set(shorts)) == len(ids)
    assert all(i.startswith(s) and len(s) == 23 for i, s in zip(ids, shorts, strict=True))


def test_an_id_of_the_callers_own_shows_whole_or_as_its_prefix() -> None:
    assert short_id("order-2026-000123") == "order-2026-000123"
    assert short_id("order-2026-000123-and-a-long-tail") == "order-2026-000123-and-a"
    assert short_id(None) == "-"


def test_the_cli_job_table_shows_the_short_form() -> None:
    from rich.console import Console

    from jobengine.core.models import Job
    from jobengine.core.states import JobState

    job_id = new_job_id()
    job = Job(id=job_id, task="t", queue="q", tenant="default", payload=None, priority=0, run_at=0.0,
              state=JobState.QUEUED, attempt=0, max_attempts=3, created_at=0.0, updated_at=0.0)  # fmt: skip
    console = Console(width=200, record=True)
    console.print(output.jobs_table([job]))
    text = console.export_text()
    assert short_id(job_id) in text and job_id not in text


def test_a_prefix_range_holds_exactly_the_ids_that_start_with_it() -> None:
    low, high = prefix_range("0193a-7")
    ids = ["0193a-6z", "0193a-7", "0193a-70", "0193a-7zz", "0193a-8", "0193a-"]
    assert [i for i in ids if low <= i < high] == [i for i in ids if i.startswith("0193a-7")]
