"""Pure flow-control logic on a controlled clock: token bucket, selection, AIMD, pressure, shedding, scale."""

from __future__ import annotations

import pytest

from jobengine.core.flow.aimd import Aimd
from jobengine.core.flow.bucket import Bucket
from jobengine.core.flow.config import parse_flow_limits
from jobengine.core.flow.limits import FlowLimits, bucket_key
from jobengine.core.flow.pressure import Load, Pressure, ShedPolicy, admits, load_state, pressure
from jobengine.core.flow.scale import Window, percentile, recommended_workers, report
from jobengine.core.flow.select import Candidate, ClaimRule, select
from jobengine.errors import ConfigError, InvalidJob


def test_bucket_refills_at_rate_up_to_burst() -> None:
    b = Bucket.full(5, now=0.0).take(5)
    assert b.available() == 0
    assert b.wait(10) == pytest.approx(0.1)
    assert b.refilled(10, 5, 0.25).available() == 2
    assert b.refilled(10, 5, 100.0).tokens == 5  # never past the burst
    assert b.refilled(10, 5, -1.0).tokens == 0  # a clock going back adds nothing


def _cands(n: int, **kw: str) -> list[Candidate]:
    return [Candidate(f"j{i:03d}", kw.get("tenant", "t"), kw.get("task", "x"), kw.get("key")) for i in range(n)]


def test_select_takes_one_token_per_job_and_writes_only_touched_buckets() -> None:
    lim = FlowLimits("q", rate=10, burst=3)
    rule = ClaimRule("q", None, lim, 10)
    first = select(rule, _cands(10), queue_running=0, key_running={}, buckets={}, now=0.0, limit=10)
    assert first.ids == ["j000", "j001", "j002"]
    key = bucket_key(lim, "t", "x")
    assert first.buckets[key].tokens == pytest.approx(0)
    # 0.1 s later one token has come back; the claim gets exactly one job.
    again = select(rule, _cands(10), queue_running=3, key_running={}, buckets=first.buckets, now=0.1, limit=10)
    assert len(again.ids) == 1
    none = select(rule, _cands(10), queue_running=4, key_running={}, buckets=again.buckets, now=0.1, limit=10)
    assert none.ids == [] and none.buckets == {}


def test_select_buckets_per_tenant_are_separate() -> None:
    lim = FlowLimits("q", rate=1, burst=1, rate_per="tenant")
    rule = ClaimRule("q", None, lim, 1)
    cands = [*_cands(3, tenant="a"), Candidate("k1", "b", "x"), Candidate("k2", "b", "x")]
    out = select(rule, cands, queue_running=0, key_running={}, buckets={}, now=0.0, limit=10)
    assert out.ids == ["j000", "k1"]


def test_select_queue_cap_and_key_concurrency() -> None:
    lim = FlowLimits("q", concurrency=1, concurrency_key="payload.account")
    rule = ClaimRule("q", 3, lim)
    cands = [Candidate("a1", "t", "x", "A"), Candidate("a2", "t", "x", "A"), Candidate("b1", "t", "x", "B"),
             Candidate("n1", "t", "x", None), Candidate("c1", "t", "x", "C")]  # fmt: skip
    out = select(rule, cands, queue_running=0, key_running={"B": 1}, buckets={}, now=0.0, limit=10)
    assert out.ids == ["a1", "n1", "c1"]  # a2: A is full after a1; b1: B already runs one; cap 3
    full = select(rule, cands, queue_running=3, key_running={}, buckets={}, now=0.0, limit=10)
    assert full.ids == []


def test_aimd_rises_under_success_and_halves_under_errors() -> None:
    aimd = Aimd(rate=10, floor=2, ceiling=14, increase=1, interval=5, target_error_rate=0.1)
    now = 0.0
    aimd.update(now)
    for _ in range(6):  # six windows of success: +1 each, capped at the ceiling
        for _ in range(20):
            aimd.observe(ok=True, latency=0.1, now=now)
        now += 5
        aimd.update(now)
    assert aimd.rate == 14 and aimd.raised == 6
    for expected in (7, 3.5, 2, 2):  # errors: halves, never below the floor
        for i in range(10):
            aimd.observe(ok=i % 2 == 0, latency=0.1, now=now)
        now += 5
        assert aimd.update(now) == expected
    now += 5
    assert aimd.update(now) == 2  # a window with no outcomes changes nothing
    assert aimd.update(now + 1) == 2  # judged only once the interval has passed


def test_aimd_halves_on_latency_over_target() -> None:
    aimd = Aimd(rate=8, floor=1, ceiling=16, interval=1, target_latency=0.5)
    aimd.update(0.0)
    for _ in range(10):
        aimd.observe(ok=True, latency=2.0, now=0.5)
    assert aimd.update(1.0) == 4


def test_pressure_levels() -> None:
    assert pressure(5, 1, 10, 20) is Pressure.NONE
    assert pressure(10, 1, 10, 20) is Pressure.SOFT
    assert pressure(20, 1, 10, 20) is Pressure.HARD
    assert pressure(20, 0, 10, 20) is Pressure.SOFT
    assert pressure(10**6, 1, None, None) is Pressure.NONE


def test_load_shedding_keeps_headroom_for_high_priority() -> None:
    policy = ShedPolicy(depth=100, in_flight=10, latency=2.0, min_priority=5)
    calm = load_state(policy, depth=10, in_flight=1, latency=0.1)
    assert calm.state is Load.NORMAL and admits(policy, calm, 0)
    busy = load_state(policy, depth=100, in_flight=10, latency=3.0)
    assert busy.state is Load.SATURATED and busy.reasons == ("depth", "in_flight", "latency")
    assert not admits(policy, busy, 4) and admits(policy, busy, 5)
    assert not ShedPolicy().enabled


def test_scale_percentiles_and_recommendation() -> None:
    assert percentile([], 0.5) == 0
    assert percentile([1, 2, 3, 4], 0.5) == 2 and percentile(list(range(1, 101)), 0.95) == 95
    # 1,000 queued, each job takes 0.5 s, drain within 60 s: one slot does 120 → 9 slots (1,000 + 10 running).
    assert recommended_workers(1000, 10, [0.5] * 10, 0.0, 60) == 9
    assert recommended_workers(0, 0, [], 0.0, 60) == 0
    w = Window(10)
    for i in range(20):
        w.add(float(i) / 2, wait=0.1 * i, run=0.2, ok=True)
    r = report("q", w, 10.0, depth=5, running=1, target=10)
    assert r.throughput == pytest.approx(2.0) and r.run_p50 == pytest.approx(0.2)
    assert r.recommended_workers >= 1


def test_limits_validate_and_name_the_field() -> None:
    bad = [
        ({"rate": 0}, "rate"),
        ({"burst": 2}, "burst"),
        ({"rate_per": "x", "rate": 1}, "rate_per"),
        ({"concurrency": 2}, "concurrency_key"),
        ({"concurrency": 1, "concurrency_key": "payload.a-b"}, "concurrency_key"),
        ({"soft_limit": 10, "hard_limit": 5}, "soft_limit"),
        ({"adaptive": True}, "adaptive"),
    ]
    for fields, name in bad:
        with pytest.raises(InvalidJob) as info:
            FlowLimits("q", **fields)  # type: ignore[arg-type]
        assert info.value.field == name
    lim = FlowLimits("q", rate=2.5)
    assert lim.bucket_size == 3 and FlowLimits.from_json("q", lim.to_json()) == lim


def test_flow_limits_setting_parses_and_names_bad_fields() -> None:
    parsed = parse_flow_limits('{"emails": {"rate": 10, "burst": 5, "hard_limit": 100}}')
    assert parsed["emails"].rate == 10 and parsed["emails"].hard_limit == 100
    with pytest.raises(ConfigError, match=r"flow_limits\.emails\.rate"):
        parse_flow_limits('{"emails": {"rate": -1}}')
    with pytest.raises(ConfigError, match=r"flow_limits\.emails\.speed"):
        parse_flow_limits('{"emails": {"speed": 1}}')


def test_select_buckets_per_tenant_and_task() -> None:
    lim = FlowLimits("q", rate=1, burst=1, rate_per="task")
    rule = ClaimRule("q", None, lim, 1)
    cands = [Candidate("a1", "t", "a"), Candidate("a2", "t", "a"), Candidate("b1", "t", "b"),
             Candidate("a3", "u", "a")]  # fmt: skip
    out = select(rule, cands, queue_running=0, key_running={}, buckets={}, now=0.0, limit=10)
    assert out.ids == ["a1", "b1", "a3"]  # one token per (tenant, task)
    assert len(out.buckets) == 3 and bucket_key(lim, "t", "a") != bucket_key(lim, "u", "a")
