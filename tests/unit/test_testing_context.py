"""testing.context(): a task function called directly gets a context that records its progress and
checkpoints and gives it the payload, the attempt, earlier phases' results and a saved checkpoint."""

from __future__ import annotations

import pytest

from jobengine import Cancelled, Engine, InvalidJob, JobContext, SyncJobContext, testing
from jobengine.engine.compose import open_store


async def test_an_async_task_called_directly_reports_progress_and_checkpoints() -> None:
    engine = Engine(open_store("memory"))

    @engine.task
    async def import_file(ctx: JobContext, url: str) -> str:
        ctx.progress(0.25, "downloading")
        await ctx.save_checkpoint({"downloaded": url})
        ctx.progress(7, None)  # stored clamped to 1.0
        return f"{ctx.phase}:{ctx.attempt}:{ctx.checkpoint['downloaded']}"

    ctx = testing.context()
    assert isinstance(ctx, JobContext) and isinstance(ctx, SyncJobContext)
    assert ctx.checkpoint is None and ctx.phase == "run"
    assert await import_file(ctx, "s3://a") == "run:1:s3://a"
    assert ctx.progress_reports == [(0.25, "downloading"), (1.0, None)]
    assert ctx.checkpoints == [{"downloaded": "s3://a"}]


def test_a_sync_task_saves_a_checkpoint_without_awaiting_it() -> None:
    def resize(ctx: SyncJobContext, path: str) -> str:
        ctx.save_checkpoint({"path": path})
        return str(ctx.checkpoint)

    ctx = testing.context(payload={"path": "/cat.png"}, attempt=2, checkpoint={"path": "/old.png"})
    assert (ctx.payload, ctx.attempt, ctx.checkpoint) == ({"path": "/cat.png"}, 2, {"path": "/old.png"})
    assert resize(ctx, "/cat.png") == "{'path': '/cat.png'}"
    assert ctx.checkpoints == [{"path": "/cat.png"}]


def test_a_phase_reads_earlier_results_and_a_cancel_stops_it() -> None:
    def transform(ctx: SyncJobContext, factor: int = 2) -> int:
        ctx.raise_if_cancelled()
        ctx.progress(1.0, "done")
        return int(ctx.results["extract"]["rows"]) * factor

    ctx = testing.context(results={"extract": {"rows": 15}}, phase="transform")
    assert ctx.phase == "transform" and dict(ctx.results) == {"extract": {"rows": 15}}
    assert transform(ctx, factor=3) == 45
    assert ctx.progress_reports == [(1.0, "done")]
    assert [(p.name, p.state.value) for p in ctx.job.phases] == [("extract", "succeeded"), ("transform", "running")]
    ctx.cancel()
    assert ctx.cancelled
    with pytest.raises(Cancelled):
        transform(ctx)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"payload": {"at": object()}}, "payload"),
        ({"checkpoint": float("nan")}, "checkpoint"),
        ({"results": {"extract": {1, 2}}}, "results"),
        ({"attempt": 0}, "attempt"),
        ({"attempt": True}, "attempt"),
    ],
)
def test_bad_input_names_its_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidJob, match=f"^{field}"):
        testing.context(**kwargs)  # type: ignore[arg-type]


def test_a_checkpoint_no_backend_could_store_is_refused() -> None:
    ctx = testing.context()
    with pytest.raises(InvalidJob, match=r"^checkpoint"):
        ctx.save_checkpoint({"x": object()})
    assert ctx.checkpoints == []
