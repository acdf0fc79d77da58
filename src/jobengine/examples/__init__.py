"""The bundled example tasks, loaded by ``jobengine up`` and runnable on their own::

    jobengine worker --app jobengine.examples:app
    jobengine enqueue etl --payload '{"rows": 40}'

There is no module-level engine: :func:`build_engine` and :func:`app` return a fresh one on every call.
"""

from __future__ import annotations

from jobengine.core.models import Job
from jobengine.core.retry import RetryPolicy
from jobengine.core.schedules import JobTemplate, Schedule, ScheduleSpec
from jobengine.engine import Engine
from jobengine.errors import AlreadyExists
from jobengine.settings import Settings
from jobengine.tasks import phase

from .tasks import extract, flaky, hello, load, publish, resize_image, transform, verify

__all__ = [
    "DEMO_KEY_PREFIX",
    "DEMO_SCHEDULE",
    "app",
    "build_engine",
    "enqueue_demo",
    "ensure_demo_schedule",
    "register",
]

#: Idempotency keys of the demo jobs start with this, so two processes starting at once enqueue them once.
DEMO_KEY_PREFIX = "demo:"
#: The example schedule of ``jobengine up``.
DEMO_SCHEDULE = "demo-greetings"


def register(engine: Engine) -> Engine:
    """Register every example task on ``engine`` (raises ConfigError if one is already registered)."""
    engine.add_task("hello", hello)
    engine.add_task("resize_image", resize_image, queue="media", max_attempts=3)
    engine.add_task(
        "etl", phases=[phase("extract", extract), phase("transform", transform), phase("load", load)], max_attempts=3
    )
    # Short backoff so the retries are visible within seconds in the live view.
    engine.add_task("flaky", flaky, max_attempts=5, retry=RetryPolicy(base=0.5, cap=2.0))
    engine.add_task("verify", verify)
    engine.add_task("publish", publish)
    return engine


def build_engine(settings: Settings | None = None) -> Engine:
    """A new engine on ``settings`` (defaults: ``.jobengine/jobengine.db``) with the example tasks registered."""
    return register(Engine.from_settings(settings or Settings()))


def app() -> Engine:
    """The factory ``jobengine worker --app jobengine.examples:app`` calls, at the edge: an engine with the
    example tasks on ``Settings.load()`` (``./jobengine.yaml`` if present, then ``JOBENGINE_*``), like every
    other command; the worker's ``--db`` and other flags override those settings."""
    return build_engine(Settings.load())


async def enqueue_demo(engine: Engine) -> list[Job]:
    """Enqueue one job of each example, in one batch: a greeting now and one scheduled a little later, an
    image resize with progress, a three-phase ETL, a flaky job that retries, and a publish that waits for
    its verify. Idempotency keys make a repeated call return the existing jobs instead of new ones."""
    verify_job = engine.new_job("verify", {"artifact": "report.pdf"}, idempotency_key=DEMO_KEY_PREFIX + "verify")
    jobs = [
        engine.new_job("hello", {"name": "Ada"}, idempotency_key=DEMO_KEY_PREFIX + "hello"),
        engine.new_job("hello", {"name": "Grace"}, delay=2.0, idempotency_key=DEMO_KEY_PREFIX + "hello-later"),
        engine.new_job("resize_image", {"images": 6, "delay": 0.15}, idempotency_key=DEMO_KEY_PREFIX + "resize"),
        engine.new_job("etl", {"rows": 20}, idempotency_key=DEMO_KEY_PREFIX + "etl"),
        engine.new_job("flaky", {"fail_rate": 0.7, "max_failures": 2}, idempotency_key=DEMO_KEY_PREFIX + "flaky"),
        verify_job,
        engine.new_job(
            "publish",
            {"artifact": "report.pdf"},
            depends_on=[verify_job.id],
            idempotency_key=DEMO_KEY_PREFIX + "publish",
        ),
    ]
    return await engine.enqueue_many(jobs)


async def ensure_demo_schedule(engine: Engine) -> Schedule | None:
    """Create the example schedule: every minute, a run that greets three names, one ``hello`` job each (a
    fan-out of items). Returns None when a schedule of that name exists already (left as it is)."""
    spec = ScheduleSpec(
        name=DEMO_SCHEDULE,
        cron="* * * * *",
        template=JobTemplate(task="hello", items=("Ada", "Grace", "Linus"), segment_size=1),
    )
    try:
        return await engine.schedules.create(spec, actor="jobengine up")
    except AlreadyExists:
        return None
