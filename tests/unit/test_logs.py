"""The command line's logging (jobengine.cli.logs), the worker's job lines (jobengine.worker.joblog) and the
redacted locations they show (jobengine.core.locations)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from jobengine import Engine
from jobengine.cli.logs import JsonFormatter, TextFormatter, apply_settings, configure_from
from jobengine.cli.main import main
from jobengine.core.locations import describe_store, describe_transport, redact_url
from jobengine.core.models import Job, JobState
from jobengine.core.queue_config import QueueConfig
from jobengine.errors import ConfigError
from jobengine.settings import Settings
from jobengine.worker import joblog
from support.waiting import until

JOB_ID = "01a222f5-cf1e-7000-8b74-9496dd02d32f"


@pytest.mark.parametrize(
    ("location", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/jobs", "postgresql://app:***@db:5432/jobs"),
        ("postgresql://app@db/jobs", "postgresql://app@db/jobs"),
        ("postgresql://db/jobs?user=app&password=s3cret", "postgresql://db/jobs?user=app&password=***"),
        ("host=db user=app password=s3cret dbname=jobs", "host=db user=app password=*** dbname=jobs"),
        ("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0"),
        ("nats://tok:s3cret@broker:4222", "nats://tok:***@broker:4222"),
        ("./jobengine.db", "./jobengine.db"),
    ],
)
def test_a_location_loses_its_password(location: str, shown: str) -> None:
    assert redact_url(location) == shown
    assert "s3cret" not in redact_url(location)


def test_stores_and_transports_are_described_by_kind_and_place() -> None:
    assert describe_store("./jobs.db") == "sqlite ./jobs.db"
    assert describe_store("sqlite:///jobs.db") == "sqlite jobs.db"  # the path open_store opens
    assert describe_store("memory") == "sqlite memory (a temporary file)"
    assert describe_store("postgresql://a:b@db/jobs", "app") == "postgres postgresql://a:***@db/jobs (schema app)"
    assert describe_transport(QueueConfig()) == "database (the store)"
    redis = QueueConfig.load({"kind": "redis", "redis": {"url": "redis://:pw@cache:6379/2"}})
    assert describe_transport(redis) == "redis redis://:***@cache:6379/2 (stream scheduler:runner)"
    assert describe_transport(QueueConfig.load({"kind": "nats"})).startswith("nats nats://127.0.0.1:4222")


CLUSTER = "nats://app:s3cret@n1:4222, nats://app:s3cret@n2:4222,nats://n3:4222"


def test_every_server_of_a_nats_cluster_loses_its_password() -> None:
    nats = QueueConfig.load({"kind": "nats", "nats": {"url": CLUSTER}})
    shown = describe_transport(nats)
    assert shown.startswith("nats nats://app:***@n1:4222,nats://app:***@n2:4222,nats://n3:4222 ")
    assert "s3cret" not in shown


async def test_the_nats_transport_says_where_it_is_without_passwords() -> None:
    from jobengine.backends.nats import NatsTransport
    from jobengine.core.queue_config import NatsConfig
    from jobengine.errors import TransportUnavailable
    from jobengine.ports.transport import Message

    transport = NatsTransport(CLUSTER, "runner", NatsConfig().runner)
    await transport.close()
    with pytest.raises(TransportUnavailable, match="the transport is closed") as raised:
        await transport.publish([Message("a-job")])
    assert "nats://app:***@n2:4222" in str(raised.value)
    assert "s3cret" not in str(raised.value)


def job_record(level: int = logging.WARNING, exc: bool = True) -> logging.LogRecord:
    try:
        {}["missing"]  # the KeyError a task raises
    except KeyError:
        info = sys.exc_info()
    fields = {"job_id": JOB_ID, "task": "lookup", "attempt": 2, "outcome": "retry", "duration_ms": 3}
    record = logging.LogRecord("jobengine.worker.jobs", level, __file__, 1, "job %s (%s) failed", (JOB_ID, "lookup"),
                               info if exc else None)  # fmt: skip
    record.__dict__.update(fields)
    return record


def test_a_json_line_holds_the_job_fields_and_the_traceback_as_a_string() -> None:
    line = JsonFormatter().format(job_record())
    assert "\n" not in line
    obj = json.loads(line)
    assert obj["level"] == "WARNING" and obj["logger"] == "jobengine.worker.jobs"
    assert obj["message"] == f"job {JOB_ID} (lookup) failed"
    assert (obj["job_id"], obj["task"], obj["attempt"], obj["outcome"], obj["duration_ms"]) == (
        JOB_ID, "lookup", 2, "retry", 3,
    )  # fmt: skip
    assert obj["time"].endswith("+00:00")
    assert obj["exc_info"].startswith("Traceback") and obj["exc_info"].endswith("KeyError: 'missing'")


def test_a_text_line_shows_the_short_id_then_the_traceback() -> None:
    text = TextFormatter().format(job_record())
    first, *rest = text.splitlines()
    assert first.endswith("WARNING jobengine.worker.jobs: job 01a222f5-cf1e-7000-8b74 (lookup) failed")
    assert JOB_ID not in first
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "KeyError: 'missing'"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    jobengine = logging.getLogger("jobengine").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("jobengine").setLevel(jobengine)
    logging.getLogger("jobengine.worker.jobs").setLevel(logging.NOTSET)


def emitted(monkeypatch: pytest.MonkeyPatch, level: int, message: str) -> str:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    logging.getLogger("jobengine.worker.jobs").log(level, message)
    return err.getvalue()


@pytest.mark.usefixtures("restore_logging")
def test_a_flag_wins_over_a_variable_and_a_variable_over_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    configure_from("error", None, {"JOBENGINE_LOG_LEVEL": "debug", "JOBENGINE_LOG_FORMAT": "json"})
    apply_settings(Settings(log_level="debug", log_format="text"))
    assert emitted(monkeypatch, logging.WARNING, "hidden") == ""
    assert json.loads(emitted(monkeypatch, logging.ERROR, "shown"))["message"] == "shown"

    configure_from(None, None, {})
    apply_settings(Settings(log_level="warning", log_format="json"))
    assert emitted(monkeypatch, logging.INFO, "hidden") == ""
    assert json.loads(emitted(monkeypatch, logging.WARNING, "shown"))["level"] == "WARNING"


@pytest.mark.usefixtures("restore_logging")
def test_the_live_view_keeps_only_dead_jobs_lines_unless_a_level_was_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    configure_from(None, None, {})
    apply_settings(Settings(), live_view=True)
    assert emitted(monkeypatch, logging.WARNING, "a retry") == ""
    assert "a dead job" in emitted(monkeypatch, logging.ERROR, "a dead job")
    configure_from("info", None, {})
    apply_settings(Settings(), live_view=True)
    assert "a start" in emitted(monkeypatch, logging.INFO, "a start")


@pytest.mark.parametrize(("flag", "value"), [("--log-level", "loud"), ("--log-format", "xml")])
@pytest.mark.usefixtures("restore_logging")
def test_a_bad_flag_is_one_error_line_naming_the_setting(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([flag, value, "jobs", "list", "--db", "memory"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {flag.removeprefix('--').replace('-', '_')}: one of") and "\n" not in err


def test_the_settings_refuse_an_unknown_level_or_format() -> None:
    with pytest.raises(ConfigError, match="log_level: one of debug, info"):
        Settings.from_mapping({}, env={"JOBENGINE_LOG_LEVEL": "chatty"})
    with pytest.raises(ConfigError, match="log_format: one of text, json"):
        Settings(log_format="yaml")
    assert Settings.from_mapping({"log_level": "DEBUG"}, env={}).log_level == "DEBUG"


def test_a_worker_the_engine_builds_names_its_store_and_transport_without_secrets() -> None:
    settings = Settings.from_mapping({
        "database": "postgresql://app:s3cret@127.0.0.1:1/jobs", "postgres_schema": "app",
        "queue": {"kind": "redis", "redis": {"url": "redis://:pw@127.0.0.1:1/3"}},
    }, env={})  # fmt: skip
    engine = Engine.from_settings(settings)  # nothing connects until used
    try:
        setup = dict(engine.worker().options.setup)
    finally:
        asyncio.run(engine.close())
    assert setup == {
        "store": "postgres postgresql://app:***@127.0.0.1:1/jobs (schema app)",
        "transport": "redis redis://:***@127.0.0.1:1/3 (stream scheduler:runner)",
    }


def test_a_failure_with_lone_surrogates_is_escaped_before_any_handler() -> None:
    """A task's exception text may hold lone surrogates: the line must still encode as UTF-8."""
    from jobengine.worker import joblog

    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    handler = Keep()
    joblog.log.addHandler(handler)
    try:
        try:
            raise ValueError("lone \udc00")
        except ValueError as exc:
            joblog.log.error("job failed: %s", exc, exc_info=exc)
    finally:
        joblog.log.removeHandler(handler)
    text = TextFormatter().format(seen[0])
    text.encode("utf-8")
    assert "lone \\udc00" in text and "ValueError" in text


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _job(n: int = 0, *, task: str | None = None) -> Job:
    """A running job, of task ``t<n>`` unless ``task`` is given."""
    return Job(JOB_ID, "default", "default", task or f"t{n}", None, 0, 0.0, JobState.RUNNING, 1, 3, 0.0, 0.0)


def _job_lines(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A job's start and end lines as the command line's handler writes them, the stamp cut off."""
    job = _job(task="lookup")
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    joblog.started(job)
    joblog.ended(job, "succeeded", 0.012)
    return [line.split("INFO", 1)[1] if "INFO" in line else line for line in err.getvalue().splitlines()]


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.usefixtures("restore_logging")
def test_job_lines_written_without_a_record_read_as_those_with_one(monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    logging.getLogger().handlers[:] = []  # pytest's own handlers would see records: only the CLI's stays
    configure_from("info", fmt, {})
    assert joblog._sole_writer(logging.INFO) is not None
    direct = _job_lines(monkeypatch)
    app = _Collect()
    logging.getLogger().addHandler(app)  # an app's handler: the lines go through records again
    assert joblog._sole_writer(logging.INFO) is None
    through_records = _job_lines(monkeypatch)
    assert len(direct) == 2 and direct == through_records
    assert [r.getMessage() for r in app.records] == [
        f"job {JOB_ID} (lookup) started (attempt 1 of 3)",
        f"job {JOB_ID} (lookup) succeeded in 12 ms (attempt 1 of 3)",
    ]
    assert app.records[1].__dict__["duration_ms"] == 12


@pytest.mark.usefixtures("restore_logging")
def test_a_filter_of_an_apps_on_the_job_lines_still_sees_every_line(monkeypatch: pytest.MonkeyPatch) -> None:
    logging.getLogger().handlers[:] = []
    configure_from("info", "text", {})
    seen: list[str] = []

    def keep(record: logging.LogRecord) -> bool:
        seen.append(record.getMessage())
        return not record.getMessage().endswith("started (attempt 1 of 3)")

    jobs = logging.getLogger("jobengine.worker.jobs")
    jobs.addFilter(keep)
    try:
        lines = _job_lines(monkeypatch)
    finally:
        jobs.removeFilter(keep)
    assert len(seen) == 2
    assert len(lines) == 1 and "succeeded in 12 ms" in lines[0]


class _Writes(io.StringIO):
    """stderr that counts its writes, and fails them while ``broken``."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.broken = False

    def write(self, s: str) -> int:
        if self.broken:
            raise OSError("stderr is gone")
        self.writes += 1
        return super().write(s)


@pytest.mark.usefixtures("restore_logging")
async def test_the_job_lines_of_one_loop_turn_go_out_in_one_write_before_any_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logging.getLogger().handlers[:] = []
    configure_from("info", "text", {})
    err = _Writes()
    monkeypatch.setattr(sys, "stderr", err)
    for n in range(3):
        joblog.started(_job(n))
        joblog.ended(_job(n), "succeeded", 0.001)
    assert err.writes == 0  # the loop has not turned yet
    await asyncio.sleep(0)
    assert err.writes == 1 and len(err.getvalue().splitlines()) == 6
    joblog.started(_job(3))
    logging.getLogger("jobengine.worker").warning("a record after a job line")
    lines = err.getvalue().splitlines()
    assert "started" in lines[6] and lines[7].endswith("a record after a job line")
    await asyncio.sleep(0)
    assert len(err.getvalue().splitlines()) == 8


@pytest.mark.usefixtures("restore_logging")
def test_job_lines_left_by_a_loop_that_closed_go_out_with_the_next_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    logging.getLogger().handlers[:] = []
    configure_from("info", "text", {})
    err = _Writes()
    monkeypatch.setattr(sys, "stderr", err)

    def line_then_stop() -> None:
        joblog.started(_job(0))
        loop.stop()  # the loop ends with this turn, before the one that would write the line

    loop = asyncio.new_event_loop()
    loop.call_soon(line_then_stop)
    loop.run_forever()
    loop.close()
    assert err.getvalue() == ""

    async def one_line() -> None:
        joblog.started(_job(1))

    asyncio.run(one_line())
    assert ["(t0)" in line for line in err.getvalue().splitlines()] == [True, False]


@pytest.mark.usefixtures("restore_logging")
async def test_a_failed_write_of_job_lines_is_not_raised_into_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    logging.getLogger().handlers[:] = []
    configure_from("info", "text", {})
    err = _Writes()
    monkeypatch.setattr(sys, "stderr", err)
    raised: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: raised.append(context))
    err.broken = True
    joblog.started(_job(0))
    await asyncio.sleep(0)  # the write fails inside the loop's callback, which reports it and returns
    err.broken = False
    joblog.started(_job(1))
    await asyncio.sleep(0)
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and "started" in lines[0]
    assert raised == []


def _json_lines(err: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.getvalue().splitlines()]


def _only_the_cli_handler(monkeypatch: pytest.MonkeyPatch, level: str, fmt: str) -> io.StringIO:
    """The command line's logging alone (pytest's handlers out), writing to the stderr returned."""
    logging.getLogger().handlers[:] = []
    configure_from(level, fmt, {})
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    return err


@pytest.mark.usefixtures("restore_logging")
async def test_a_job_that_ends_before_its_start_line_is_due_gets_its_end_line_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    err = _only_the_cli_handler(monkeypatch, "info", "json")
    lines = joblog.JobLog()
    lines.before_run(_job(0))
    lines.after_attempt(_job(0), "succeeded", 0.003, None)
    await until(lambda: lines._timer is None, "the start's timer, which finds the start taken back")
    await asyncio.sleep(0)
    assert [(line["outcome"], line["duration_ms"]) for line in _json_lines(err)] == [("succeeded", 3)]


@pytest.mark.usefixtures("restore_logging")
async def test_a_job_still_running_gets_its_start_line_stamped_with_its_start(monkeypatch: pytest.MonkeyPatch) -> None:
    err = _only_the_cli_handler(monkeypatch, "info", "json")
    lines = joblog.JobLog()
    running = replace(_job(1), id="01a222f5-cf1e-7000-8b74-9496dd02d330")
    lines.before_run(_job(0))
    lines.before_run(running)
    began = time.time()
    lines.after_attempt(_job(0), "succeeded", 0.001, None)  # ends at once: no start line
    await until(lambda: err.getvalue().count("\n") >= 2, "the running job's start line")
    [end, start] = _json_lines(err)
    assert (end["outcome"], start["outcome"], start["task"]) == ("succeeded", "started", "t1")
    stamped = datetime.fromisoformat(start["time"]).timestamp()
    assert stamped <= began  # written START_LINE_AFTER later, stamped when the job began
    assert lines._timer is None and not lines._starts


@pytest.mark.usefixtures("restore_logging")
async def test_at_debug_every_start_line_is_written_as_the_job_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    err = _only_the_cli_handler(monkeypatch, "debug", "text")
    lines = joblog.JobLog()
    lines.before_run(_job(0))
    await asyncio.sleep(0)
    assert "(t0) started (attempt 1 of 3)" in err.getvalue()
    assert lines._timer is None


@pytest.mark.usefixtures("restore_logging")
async def test_a_line_that_cannot_be_made_is_reported_and_the_turns_others_are_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    err = _only_the_cli_handler(monkeypatch, "info", "text")
    [handler] = logging.getLogger().handlers
    write = handler.write_line  # type: ignore[attr-defined]
    write(logging.INFO, "jobengine.worker.jobs", "job %s first", ("a",), {})
    write(logging.INFO, "jobengine.worker.jobs", "job %d broken", ("not a number",), {})
    write(logging.INFO, "jobengine.worker.jobs", "job %s last", ("c",), {})
    await asyncio.sleep(0)
    out = err.getvalue()
    assert "job a first" in out and "job c last" in out and "broken" in out  # the report names the message
    assert "--- Logging error ---" in out
