"""The scheduler's tables on SQLite: the statements shared by its transactions (the row mapping is in
:mod:`jobengine.backends.scheduling_rows`, shared with PostgreSQL)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from jobengine.backends.scheduling_rows import (
    RUN_COLUMNS,
    RUN_WIDTH,
    SCHEDULE_COLUMNS,
    SIGNATURE_COLUMNS,
    SIGNATURE_WIDTH,
    TRIGGER_DATA,
    run_from_row,
    run_values,
    schedule_from_row,
    signature_from_row,
    signature_values,
    trigger_data_value,
    with_trigger_data,
)
from jobengine.core.runs import Run
from jobengine.core.schedules import Schedule
from jobengine.core.signatures import Signature


def select_schedules(conn: sqlite3.Connection, where: str, params: Sequence[Any] = ()) -> list[Schedule]:
    rows = conn.execute(f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE {where}", params)
    return [schedule_from_row(r) for r in rows]


def insert_run(conn: sqlite3.Connection, run: Run) -> None:
    marks = ", ".join("?" * (RUN_WIDTH + 1))
    sql = f"INSERT INTO runs ({RUN_COLUMNS}, {TRIGGER_DATA}) VALUES ({marks})"
    conn.execute(sql, (*run_values(run), trigger_data_value(run)))


def save_run(conn: sqlite3.Connection, run: Run) -> None:
    """Write back every column of a run but its id (under the write lock: nobody changed it meanwhile)."""
    names = RUN_COLUMNS.split(", ")[1:]
    sets = ", ".join(f"{n} = ?" for n in names)
    conn.execute(f"UPDATE runs SET {sets} WHERE id = ?", (*run_values(run)[1:], run.id))


def select_runs(conn: sqlite3.Connection, where: str, params: Sequence[Any] = ()) -> list[Run]:
    return [run_from_row(r) for r in conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE {where}", params)]


def select_runs_with_data(conn: sqlite3.Connection, where: str, params: Sequence[Any] = ()) -> list[Run]:
    """As :func:`select_runs`, with each run's ``trigger_data``."""
    rows = conn.execute(f"SELECT {RUN_COLUMNS}, {TRIGGER_DATA} FROM runs WHERE {where}", params)
    return [with_trigger_data(run_from_row(r), r[RUN_WIDTH]) for r in rows]


def upsert_signature(conn: sqlite3.Connection, s: Signature) -> None:
    marks = ", ".join("?" * SIGNATURE_WIDTH)
    sql = f"INSERT OR REPLACE INTO failure_signatures ({SIGNATURE_COLUMNS}) VALUES ({marks})"
    conn.execute(sql, signature_values(s))


def select_signatures(conn: sqlite3.Connection, where: str, params: Sequence[Any] = ()) -> list[Signature]:
    rows = conn.execute(f"SELECT {SIGNATURE_COLUMNS} FROM failure_signatures WHERE {where}", params)
    return [signature_from_row(r) for r in rows]
