"""An app with middleware, for the test that a ``jobengine worker --app`` process runs the app's hooks: each
hook appends ``<pid> <hook> <task> <detail>`` to the file ``$HOOKS``. ``flaky`` fails its first attempt,
``hopeless`` every one of its two. Settings come from ``JOBENGINE_*`` (the database)."""

from __future__ import annotations

import os

from jobengine import Job, Middleware, NewJob
from jobengine.core.models import Json
from jobengine.core.retry import RetryPolicy
from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.worker import JobContext


def _write(hook: str, task: str, detail: object = "") -> None:
    with open(os.environ["HOOKS"], "a") as f:
        f.write(f"{os.getpid()} {hook} {task} {detail}".rstrip() + "\n")


class FileHooks(Middleware):
    def before_enqueue(self, job: NewJob) -> None:
        _write("before_enqueue", job.task)

    def before_run(self, job: Job) -> None:
        _write("before_run", job.task, job.attempt)

    async def after_run(self, job: Job, result: Json) -> None:
        _write("after_run", job.task, result)

    def on_failure(self, job: Job, error: BaseException) -> None:
        _write("on_failure", job.task, error)

    def on_retry(self, job: Job, error: BaseException, retry_at: float) -> None:
        _write("on_retry", job.task)

    async def on_dead(self, job: Job, error: BaseException) -> None:
        _write("on_dead", job.task)


app = Engine.from_settings(Settings.load(), middleware=[FileHooks()])


@app.task(max_attempts=2, retry=RetryPolicy(base=0.01, cap=0.02))
def flaky(ctx: JobContext) -> str:
    if ctx.attempt == 1:
        raise RuntimeError("first attempt")
    return "second"


@app.task(max_attempts=2, retry=RetryPolicy(base=0.01, cap=0.02))
async def hopeless(ctx: JobContext) -> None:
    raise ValueError(f"attempt {ctx.attempt}")
