"""The SignatureStore port on every backend: upserts per tenant and fingerprint, flags, status changes."""

from __future__ import annotations

import pytest

from jobengine.core.ids import JobId
from jobengine.core.schedules import audit_event
from jobengine.core.signatures import SignatureFilter, SignatureHit, SignatureStatus, fingerprint
from jobengine.errors import NotFound
from jobengine.ports.schedules import SchedulingBackend, SchedulingStore
from jobengine.ports.store import Store

from .helpers import T0

pytestmark = pytest.mark.timeout(300)

BUG = fingerprint("KeyError", "order 12 missing", None)
OTHER = fingerprint("ValueError", "bad date", None)


@pytest.fixture
def sched(store: Store) -> SchedulingStore:
    assert isinstance(store, SchedulingBackend)
    return store.scheduling()


def hit(n: int, tenant: str = "default", fp: object = BUG, at: float = T0) -> SignatureHit:
    return SignatureHit(tenant, fp, JobId(f"job-{n}"), "import", at + n)  # type: ignore[arg-type]


async def test_occurrences_add_up_per_tenant_and_fingerprint(sched: SchedulingStore) -> None:
    await sched.record_signatures([hit(i) for i in range(15)], T0)
    await sched.record_signatures([hit(15), hit(0, "acme"), hit(1, fp=OTHER)], T0)
    bug = await sched.get_signature("default", BUG.key)
    assert bug is not None
    assert (bug.occurrences, bug.first_seen, bug.last_seen) == (16, T0, T0 + 15)
    assert bug.sample_job_ids == tuple(JobId(f"job-{i}") for i in range(6, 16))  # the latest 10
    assert (bug.error_type, bug.message, bug.status) == ("KeyError", "order <n> missing", SignatureStatus.ACTIVE)
    acme = await sched.get_signature("acme", BUG.key)
    assert acme is not None and acme.occurrences == 1
    assert await sched.get_signature("default", "nope") is None
    listed = await sched.list_signatures(SignatureFilter(tenant="default"))
    assert [s.key for s in listed] == [BUG.key, OTHER.key]  # most recently seen first
    assert len(await sched.list_signatures(SignatureFilter())) == 3
    assert len(await sched.list_signatures(SignatureFilter(limit=1))) == 1


async def test_marks_and_status(sched: SchedulingStore, store: Store) -> None:
    await sched.record_signatures([hit(0), hit(0, "acme")], T0)
    assert await sched.non_retryable_signatures() == set()
    event = audit_event("signature.updated", "default", "alice", {"key": BUG.key})
    updated, events = await sched.update_signature("default", BUG.key, SignatureStatus.RESOLVED, True, T0 + 5, event)
    assert (updated.status, updated.non_retryable) == (SignatureStatus.RESOLVED, True)
    assert [e.type for e in events] == ["signature.updated"]
    assert await sched.non_retryable_signatures() == {("default", BUG.key)}
    # A resolved signature that occurs again is active again (a regression); the mark stays.
    await sched.record_signatures([hit(1)], T0)
    again = await sched.get_signature("default", BUG.key)
    assert again is not None and (again.status, again.non_retryable, again.occurrences) == (
        SignatureStatus.ACTIVE, True, 2)  # fmt: skip
    await sched.update_signature("default", BUG.key, SignatureStatus.SUPPRESSED, None, T0 + 6, event)
    await sched.record_signatures([hit(2)], T0)
    suppressed = await sched.get_signature("default", BUG.key)
    assert suppressed is not None and suppressed.status is SignatureStatus.SUPPRESSED
    assert [s.tenant for s in await sched.list_signatures(SignatureFilter(statuses=(SignatureStatus.ACTIVE,)))] == [
        "acme"
    ]
    with pytest.raises(NotFound):
        await sched.update_signature("default", "nope", None, True, T0, event)
