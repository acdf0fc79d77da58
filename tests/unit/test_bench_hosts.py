"""bench/hosts.py without the bed: it refuses to run without root, and its table names what bounds the rate
from the run's own figures. The bench itself runs on the bed in tests/acceptance/test_bench_hosts.py."""

from __future__ import annotations

import math

import pytest
from bench import hosts
from bench.hosts import Sample, table


def _sample(sleep_ms: float, n: int, steady: float, busy: float, share: float = 0.5) -> Sample:
    return Sample(
        sleep_ms=sleep_ms, hosts=n, enqueue=1000.0, drained=steady * 0.9, steady=steady, busy=busy,
        bed_share=share, worker_cpu=0.002, postgres_cpu=0.0005, checks=(),
    )  # fmt: skip


def test_without_root_it_says_so_and_exits_non_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(hosts.os, "geteuid", lambda: 1000)
    assert hosts.main(["--jobs", "10", "--runs", "1", "--result", ""]) == 2
    assert "needs root" in capsys.readouterr().err


def test_more_than_three_hosts_is_refused() -> None:
    with pytest.raises(SystemExit):
        hosts.parse(["--hosts", "1,4"])


def test_the_table_gives_medians_the_growth_and_what_bounds_each_variant() -> None:
    samples = [
        # CPU-bound: flat across hosts, the cores busy with the bed's own processes.
        *(_sample(0, n, steady, busy=0.98, share=0.9) for n, steady in [(1, 900), (1, 1100), (1, 1000), (3, 1050)]),
        # I/O-bound: at the slot ceiling of 3 hosts x 10 slots / 20 ms = 1,500 jobs/s, cores to spare.
        *(_sample(20, n, steady, busy=0.5) for n, steady in [(1, 480), (3, 1450)]),
    ]
    lines = table(samples, concurrency=10)
    rows = [line for line in lines if line.startswith("| CPU") or line.startswith("| I/O")]
    assert len(rows) == 4
    cpu1, cpu3, io1, io3 = (row.split(" | ") for row in rows)
    assert cpu1[2] == "900 (810 - 990)"  # launch -> drained: median (min - max) of the three runs
    assert cpu1[3] == "1,000 (900 - 1,100)"
    assert (cpu1[4], cpu3[4]) == ("1.00", "1.05")
    assert float(io3[4]) == pytest.approx(1450 / 480, abs=0.01)
    assert io1[-1] == "ok |"
    notes = [line for line in lines if line.startswith("- ")]
    assert "the CPU bounds it" in notes[0] and "98% busy, 90% of them the workers" in notes[0]
    assert "the sleep bounds it" in notes[1] and "1,500 jobs/s" in notes[1]


def test_growth_on_a_machine_busy_with_other_work_is_named_as_such() -> None:
    samples = [_sample(0, 1, 500, busy=1.0, share=0.1), _sample(0, 3, 1200, busy=1.0, share=0.3)]
    (note,) = [line for line in table(samples, concurrency=10) if line.startswith("- ")]
    assert "had 30% of them (10% with 1 host(s))" in note and "a larger share of a shared machine" in note


def test_idle_cores_leave_the_round_trips_as_the_bound() -> None:
    samples = [_sample(20, 1, 200, busy=0.4), _sample(20, 2, 390, busy=0.6)]
    (note,) = [line for line in table(samples, concurrency=10) if line.startswith("- ")]
    assert "below its slot ceiling of 1,000 jobs/s (steady 390)" in note and "round trips" in note


def test_a_measure_that_did_not_finish_shows_as_missing_and_its_check() -> None:
    bad = Sample(0, 1, 1000.0, math.nan, math.nan, 1.0, 0.5, 0.0, 0.0, ("TIMEOUT: 5/10 ran in 1s",))
    (row,) = [line for line in table([bad], 10) if line.startswith("| CPU")]
    assert "| 1 | - | - | - |" in row and "TIMEOUT" in row
