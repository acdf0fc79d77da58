"""What each bulk action takes, and the checks of a search filter."""

from __future__ import annotations

import pytest

from jobengine.core.models import Job, JobFilter, check_filter
from jobengine.core.selection import BulkAction, refusal
from jobengine.core.states import JobState
from jobengine.errors import InvalidJob


def job(state: JobState) -> Job:
    return Job(id="j", task="t", queue="q", tenant="default", payload=None, priority=0, run_at=0.0, state=state,
               attempt=0, max_attempts=3, created_at=0.0, updated_at=0.0)  # fmt: skip


@pytest.mark.parametrize(
    ("action", "takes"),
    [
        (BulkAction.CANCEL, {JobState.BLOCKED, JobState.SCHEDULED, JobState.QUEUED, JobState.RUNNING, JobState.FAILED}),
        (BulkAction.RETRY, {JobState.DEAD, JobState.CANCELLED, JobState.FAILED}),
        (BulkAction.REPLAY, {JobState.DEAD}),
        (BulkAction.DELETE, {JobState.DEAD}),
    ],
)
def test_each_action_takes_the_states_its_single_job_form_takes(action: BulkAction, takes: set[JobState]) -> None:
    assert {s for s in JobState if refusal(action, job(s)) is None} == takes
    assert all(refusal(action, job(s)) for s in set(JobState) - takes)


def test_an_unknown_action_and_bad_filters_name_the_field() -> None:
    with pytest.raises(InvalidJob) as caught:
        BulkAction.parse("explode")
    assert caught.value.field == "action"
    for bad, field in (
        (JobFilter(id_prefix="a b"), "id"),
        (JobFilter(payload_text="x" * 201), "payload"),
        (JobFilter(payload_text="nul\x00"), "payload"),
        (JobFilter(created_after=-5.0), "created_after"),
    ):
        with pytest.raises(InvalidJob) as caught:
            check_filter(bad)
        assert caught.value.field == field
    assert check_filter(JobFilter(id_prefix="0193", payload_text="Ada")).id_prefix == "0193"
