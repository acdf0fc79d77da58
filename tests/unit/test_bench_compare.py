"""``python -m bench.compare`` runs jobengine at the product's defaults as well as tuned, and its table gives
a ratio for each against the faster other system."""

from __future__ import annotations

from bench.compare.__main__ import DEFAULTS, table, worker_flags

from jobengine.settings import Settings


def test_defaults_are_the_products_settings_not_the_benchmarks() -> None:
    d = Settings()
    assert worker_flags(DEFAULTS) == [
        "--concurrency", str(d.worker_concurrency), "--fetch-batch", str(d.fetch_batch),
        "--worker-log-level", d.log_level,
    ]  # fmt: skip
    assert worker_flags("300/0") == ["--concurrency", "300", "--fetch-batch", "0"]
    assert worker_flags("100") == ["--concurrency", "100", "--fetch-batch", "0"]


def _m(system: str, workers: str, phase: str, metric: str, value: float, unit: str) -> dict[str, object]:
    return {"system": system, "workers": workers, "phase": phase, "metric": metric, "value": value, "unit": unit}


def test_the_table_gives_the_defaults_ratio_and_the_tuned_ratio() -> None:
    measures = [
        _m("jobengine defaults", "2x50", "process", "launch to drained", 4000, "jobs/s"),
        _m("jobengine", "2x300", "process", "launch to drained", 6000, "jobs/s"),
        _m("pgqueuer", "2x16", "process", "launch to drained", 3000, "jobs/s"),
        _m("pgqueuer", "2x64", "process", "launch to drained", 5000, "jobs/s"),
        _m("jobengine defaults", "2x50", "latency", "p50", 4.0, "ms"),
        _m("jobengine", "2x300", "latency", "p50", 2.0, "ms"),
        _m("pgqueuer", "2x64", "latency", "p50", 3.0, "ms"),
    ]
    rows = {line.split("|")[1].strip(): line for line in table(measures).splitlines()[2:]}
    process = [c.strip() for c in rows["process"].split("|")]
    assert process[-3:-1] == ["0.80x", "1.20x"]  # against PgQueuer's best setting (batch 64), not its worst
    latency = [c.strip() for c in rows["latency"].split("|")]
    assert latency[-3:-1] == ["0.75x", "1.50x"]  # lower is better: the rival's over jobengine's
