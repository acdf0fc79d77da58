"""The one id resolver's rules (a whole id first, then a unique prefix of at least eight characters), the
short form of typed ids, and the live view's id column for events that belong to no job."""

from __future__ import annotations

import time

import pytest

from jobengine.cli.output import event_line
from jobengine.core.ids import IdKind, new_job_id, short_id
from jobengine.core.models import Event
from jobengine.errors import AmbiguousId, InvalidJob, NotFound
from jobengine.ports.ids import CANDIDATES_SHOWN, resolve_id


class Ids:
    """An IdIndex over a list: the rule every store answers by (ids that start with the prefix, in order)."""

    def __init__(self, *ids: str) -> None:
        self.ids = sorted(ids)

    async def ids_with_prefix(self, kind: IdKind, prefix: str, tenant: str | None, limit: int) -> list[str]:
        return [i for i in self.ids if i.startswith(prefix)][:limit]


async def test_a_whole_id_wins_over_longer_ids_that_start_with_it() -> None:
    index = Ids("order-1", "order-12", "order-123")
    assert await resolve_id(index, IdKind.JOB, "order-12") == "order-12"
    assert await resolve_id(index, IdKind.JOB, "order-123") == "order-123"


async def test_a_unique_prefix_names_its_id_and_a_shared_one_names_candidates() -> None:
    ids = [f"0193a1b2-c3d4-7{n:03x}-8000-000000000000" for n in range(8)]
    index = Ids(*ids)
    assert await resolve_id(index, IdKind.RUN, ids[3][:18]) == ids[3]
    with pytest.raises(AmbiguousId) as ambiguous:
        await resolve_id(index, IdKind.RUN, "0193a1b2-c3d4")
    assert ambiguous.value.candidates == ids[:CANDIDATES_SHOWN]
    assert str(ambiguous.value).startswith("run_id: '0193a1b2-c3d4' is the start of several run ids")


async def test_a_short_prefix_an_unknown_one_and_a_bad_text_say_which() -> None:
    index = Ids("0193a1b2-c3d4-7000-8000-000000000000")
    with pytest.raises(NotFound, match="at least 8 characters"):
        await resolve_id(index, IdKind.SCHEDULE, "0193a1b")
    with pytest.raises(NotFound) as unknown:
        await resolve_id(index, IdKind.ENDPOINT, "we_0193a1b2")
    assert str(unknown.value) == "webhook endpoint 'we_0193a1b2' not found"
    with pytest.raises(InvalidJob) as bad:
        await resolve_id(index, IdKind.KEY, "je_x/y")
    assert bad.value.field == "key_id"


def test_a_typed_id_keeps_its_mark_in_its_short_form() -> None:
    endpoint = "we_" + new_job_id()
    assert short_id(endpoint) == endpoint[:26] and len(short_id("wd_" + new_job_id())) == 26
    assert short_id("abc_0193a1b2-c3d4-7000-8000-000000000000") == "abc_0193a1b2-c3d4-7000-"


def test_the_live_view_names_a_run_event_by_its_run() -> None:
    run_id = new_job_id()
    event = Event(1, time.time(), "run.created", "default", None, None, None, {"run_id": run_id, "state": "queued"})
    assert f" {short_id(run_id)} " in event_line(event).plain
