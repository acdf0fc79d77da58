"""The diff of a simulate run, item by item: how a segment's result is read per item (a list in item order,
an object keyed by item, or one result for the whole segment) and same / changed / new / gone."""

from __future__ import annotations

from jobengine.core.ids import JobId, RunId
from jobengine.core.models import Job, Json
from jobengine.core.run_diff import ItemChange, RunDiff, diff_results, item_results
from jobengine.core.run_modes import RunMode, mode_of
from jobengine.core.states import JobState


def segment(items: list[Json], result: Json, mode: str = "full", run: str | None = "r1") -> Job:
    return Job(
        id=JobId(f"j{items}"), tenant="default", queue="default", task="score", payload={"items": items, "mode": mode},
        priority=0, run_at=0.0, state=JobState.SUCCEEDED, attempt=1, max_attempts=1, created_at=0.0, updated_at=0.0,
        result=result, run_id=RunId(run) if run else None,
    )  # fmt: skip


def test_a_segment_result_is_read_per_item() -> None:
    found = item_results([
        segment([1, 2], [10, 20]),  # a list as long as the items: in order
        segment(["a", "b"], {"a": 1, "b": 2, "total": 3}),  # keyed by item
        segment([{"id": 7}], {'{"id":7}': "x"}),  # a JSON item by its canonical text
        segment([3, 4], {"ok": True}),  # anything else: the whole result for each item
    ])  # fmt: skip
    assert {k: v[1] for k, v in found.items()} == {
        "1": 10, "2": 20, '"a"': 1, '"b"': 2, '{"id":7}': "x", "3": {"ok": True}, "4": {"ok": True},
    }  # fmt: skip


def test_same_changed_new_gone_in_item_order() -> None:
    before = item_results([segment([1, 2, 3], [1, 2, 3])])
    after = item_results([segment([2, 3, 4], [2, 30, 4])])
    entries = diff_results(before, after)
    assert [(e.item, e.change, e.before, e.after) for e in entries] == [
        (1, ItemChange.GONE, 1, None), (2, ItemChange.SAME, 2, 2), (3, ItemChange.CHANGED, 3, 30),
        (4, ItemChange.NEW, None, 4),
    ]  # fmt: skip
    diff = RunDiff("sim", "base", entries)
    assert diff.counts == {"same": 1, "changed": 1, "new": 1, "gone": 1}
    assert [e["item"] for e in diff.to_json()["entries"]] == [1, 3, 4]
    assert len(diff.to_json(same=True)["entries"]) == 4


def test_a_job_mode_comes_from_its_run_request() -> None:
    assert mode_of(segment([1], None, "simulate")) is RunMode.SIMULATE
    assert mode_of(segment([1], None, "simulate", run=None)) is RunMode.FULL  # not a run's job
    assert mode_of(segment([1], None, "sometimes")) is RunMode.FULL


def test_a_packs_task_is_one_stream_whatever_its_version() -> None:
    from jobengine.core.run_requests import RunRequest, stream_task

    names = ("scores@1.0.0:score", "scores@stable:score", "scores@2.0.0-rc.1:score", "scores@" + "a" * 64 + ":score")
    assert {stream_task(n) for n in names} == {"scores@*:score"}
    assert RunRequest(task="scores@1.1.0:score", source="crm").stream == "scores@*:score crm"
    assert RunRequest(task="score").stream == "score default"  # an ordinary task keeps its name
    assert stream_task("a@b") == "a@b" and stream_task("Scores@1.0.0:x") == "Scores@1.0.0:x"
