"""Turning the measures of every run into one table: median and spread (min - max) per measure."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from bench.phases import Measure

# The targets the issue states for SQLite: (phase, metric prefix, "≥" or "<", value).
TARGETS: dict[str, list[tuple[str, str, str, float]]] = {
    "sqlite": [
        ("enqueue batch", "jobs/s", "≥", 50_000),
        ("process", "jobs/s (launch -> drained)", "≥", 5_000),
        ("latency", "p50", "<", 5.0),
    ],
}


@dataclass
class Row:
    workers: str
    phase: str
    metric: str
    unit: str
    values: list[float] = field(default_factory=list)
    checks: dict[str, list[str]] = field(default_factory=dict)

    @property
    def good(self) -> list[float]:
        return [v for v in self.values if not math.isnan(v)]


def aggregate(measures: list[Measure]) -> list[Row]:
    rows: dict[tuple[str, str, str], Row] = {}
    for m in measures:
        row = rows.setdefault((m.workers, m.phase, m.metric), Row(m.workers, m.phase, m.metric, m.unit))
        row.values.append(m.value)
        for what, value in m.checks:
            row.checks.setdefault(what, []).append(value)
    return list(rows.values())


def fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "-"
    if unit == "ms":
        return f"{value:,.2f}"
    if unit == "s":
        return f"{value:,.3f}"
    return f"{value:,.0f}"


def target_of(backend: str, row: Row) -> tuple[str, bool | None]:
    for phase, prefix, op, limit in TARGETS.get(backend, []):
        if row.phase == phase and row.metric.startswith(prefix):
            if not row.good:
                return f"{op} {fmt(limit, row.unit)}", False
            median = statistics.median(row.good)
            met = median >= limit if op == "≥" else median < limit
            return f"{op} {fmt(limit, row.unit)}", met
    return "", None


def cells(backend: str, row: Row) -> list[str]:
    good = row.good
    median = fmt(statistics.median(good), row.unit) if good else "-"
    spread = f"{fmt(min(good), row.unit)} - {fmt(max(good), row.unit)}" if good else "-"
    runs = f"{len(good)}" if len(good) == len(row.values) else f"{len(good)} of {len(row.values)}"
    target, met = target_of(backend, row)
    if met is not None:
        target += "  ok" if met else "  MISSED"
    checks = "; ".join(
        f"{what} {values[0] if len(set(values)) == 1 else '/'.join(values)}" for what, values in row.checks.items()
    )
    return [row.workers, row.phase, row.metric, median, spread, runs, target, checks]


HEADERS = ["workers (procs x conc.)", "phase", "measure", "median", "min - max", "runs", "target", "checks"]


def render(title: str, backend: str, rows: list[Row], notes: list[str]) -> None:
    data = [cells(backend, r) for r in rows]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        _plain(title, data, notes)
        return
    table = Table(title=title, title_justify="left", caption="\n".join(notes), caption_justify="left")
    for h in HEADERS:
        right = h in ("median", "min - max", "runs")
        wrap = h == "checks"
        table.add_column(h, justify="right" if right else "left", no_wrap=not wrap, overflow="fold")
    previous = None
    for row, values in zip(rows, data, strict=True):
        if previous is not None and row.workers != previous:
            table.add_section()
        previous = row.workers
        table.add_row(*values)
    Console(width=max(200, Console().width)).print(table)


def _plain(title: str, data: list[list[str]], notes: list[str]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in data)) for i, h in enumerate(HEADERS)]
    print(title)
    for line in (HEADERS, ["-" * w for w in widths], *data):
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    for note in notes:
        print(note)
