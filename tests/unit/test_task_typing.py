"""mypy strict on a user's file: a task handle's ``enqueue`` takes the task's own parameters and
``options`` its typed keywords, so a typo is an error before anything runs.

Each line marked ``# error`` must be reported, and no other line.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

USER_FILE = """
from __future__ import annotations

from jobengine import Engine, JobContext, JobHandle, Settings, SyncJobContext

engine = Engine.from_settings(Settings(database="memory"))


@engine.task(max_attempts=5)
async def send_welcome(email: str, lang: str = "en") -> str:
    return f"sent to {email}"


@engine.task
def render(ctx: SyncJobContext, report: str, pages: int = 1) -> int:
    return len(report) * pages


@engine.task(queue="work")
async def count(ctx: JobContext, n: int) -> list[int]:
    return [n]


async def producer() -> None:
    ok: JobHandle[str] = await send_welcome.enqueue("ada@example.com", lang="en")
    text: str = await ok.result(timeout=30)
    pages: int = render.enqueue_sync("r", pages=2).result_sync(timeout=30)
    later = send_welcome.options(queue="mail", priority=5, delay=60, idempotency_key="k", depends_on=[ok])
    await later.enqueue(email="bob@example.com")
    numbers: list[int] = await (await count.enqueue(3)).result()
    direct: str = await send_welcome("ada@example.com")
    print(text, pages, numbers, direct)

    await send_welcome.enqueue(emial="x")  # error
    await send_welcome.options(prority=5).enqueue("x")  # error
    await send_welcome.enqueue(42)  # error
    wrong: int = await ok.result()  # error
    render.enqueue_sync(ctx=None, report="r")  # error
    count.options(delay="soon")  # error
    print(wrong)
"""


def test_mypy_strict_reports_each_misuse_of_a_task_handle_and_nothing_else(tmp_path: Path) -> None:
    source = tmp_path / "user_app.py"
    source.write_text(USER_FILE)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir", str(tmp_path / "cache"),
         str(source)],
        cwd=tmp_path, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    reported = {int(m[1]) for m in re.finditer(r"^.*user_app\.py:(\d+): error:", done.stdout, re.MULTILINE)}
    expected = {i for i, line in enumerate(USER_FILE.splitlines(), 1) if line.endswith("# error")}
    assert len(expected) == 6
    assert reported == expected, done.stdout + done.stderr
    assert 'Unexpected keyword argument "emial"' in done.stdout
    assert 'Unexpected keyword argument "prority"' in done.stdout
