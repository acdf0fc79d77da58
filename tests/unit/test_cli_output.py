"""The CLI's short job ids tell apart jobs enqueued together."""

from __future__ import annotations

from jobengine.cli.output import short_id
from jobengine.core.ids import new_job_id


def test_ids_made_in_one_burst_have_distinct_short_forms() -> None:
    ids = [new_job_id() for _ in range(500)]  # many share a millisecond, and so their random part
    assert len({i[-8:] for i in ids}) < len(ids)  # why the tail alone does not do
    shorts = [short_id(i) for i in ids]
    assert len(set(shorts)) == len(ids)
    assert all(len(s) == 8 for s in shorts)


def test_an_id_of_the_callers_own_shows_its_last_eight_characters() -> None:
    assert short_id("order-2026-000123") == "6-000123"
    assert short_id(None) == "-"
