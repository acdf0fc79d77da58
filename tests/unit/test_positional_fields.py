"""Values built by position on the hot paths (docs/decisions/0020-positional-construction.md) still match the
order of their dataclass's fields: a field added or moved fails here, not at run time."""

from __future__ import annotations

import inspect
from dataclasses import fields

from jobengine.backends.postgres.rows import JOB_COLUMNS
from jobengine.core.models import Job, NewJob
from jobengine.engine import Engine


def test_newjob_fields_are_in_the_order_engine_new_job_passes_them() -> None:
    order = ("task", "payload", "queue", "priority", "run_at", "max_attempts", "idempotency_key", "depends_on",
             "tenant", "timeout")  # fmt: skip
    assert tuple(f.name for f in fields(NewJob))[: len(order)] == order
    assert "return NewJob(" in inspect.getsource(Engine.new_job)  # still built by position


def test_postgres_job_columns_are_the_job_fields_in_order() -> None:
    assert [name for _, name in JOB_COLUMNS] == [f.name for f in fields(Job)]
