"""The README's Python example, its test file, and the example ``help(jobengine)`` opens on run as standalone
scripts (in a new interpreter, in an empty directory) and do what their comments say."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import jobengine

ROOT = Path(__file__).resolve().parents[2]


def _python_block(markdown: str, section: str) -> str:
    text = markdown[markdown.index(section) :]
    found = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert found is not None, f"no python block under {section!r}"
    return found[1]


def _run(script: str, cwd: Path) -> str:
    (cwd / "example.py").write_text(script)
    done = subprocess.run(
        [sys.executable, "example.py"], cwd=cwd, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "", done.stderr  # no warning, no "Task was destroyed" at exit
    return done.stdout


def test_the_readme_python_example_runs_and_gets_its_result(tmp_path: Path) -> None:
    script = _python_block((ROOT / "README.md").read_text(), "## In Python")
    assert "send_welcome.options(" in script and ".result(" in script
    assert _run(script, tmp_path).splitlines() == ["sent to ada@example.com (en)"]
    with sqlite3.connect(tmp_path / "jobs.db") as db:
        rows = dict(db.execute("SELECT task, state FROM jobs").fetchall())
    assert rows == {"etl": "succeeded", "send_welcome": "succeeded"}
    # Run again on the same file: the idempotency key names the job already done, whose result comes back.
    assert _run(script, tmp_path).splitlines() == ["sent to ada@example.com (en)"]


def test_the_readme_testing_example_passes_under_pytest(tmp_path: Path) -> None:
    """The "Testing your tasks" block is a user's test file: pytest runs it in a directory of its own, with
    the ``jobengine_testing`` fixture from jobengine's pytest plugin, and never opens the app's database."""
    script = _python_block((ROOT / "README.md").read_text(), "## Testing your tasks")
    (tmp_path / "test_billing.py").write_text(script)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_billing.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\b2 passed\b", done.stdout), done.stdout
    assert not (tmp_path / ".jobengine").exists()


def test_the_example_help_opens_on_runs(tmp_path: Path) -> None:
    doc = jobengine.__doc__ or ""
    block = doc[doc.index("Usage::") + len("Usage::") : doc.index("The names to start from")]
    script = "\n".join(line[4:] for line in block.splitlines())
    assert _run(script, tmp_path).splitlines() == ["sent to ada@example.com"]


def test_the_readme_middleware_example_runs_its_hooks(tmp_path: Path) -> None:
    script = _python_block((ROOT / "README.md").read_text(), "## Hooks around jobs")
    assert "class ErrorReporting(Middleware)" in script and "def after_attempt" in script
    assert _run(script, tmp_path).splitlines() == ["resized cat.png", "['resize.succeeded']"]
    # Its error hook, as written, on a task that fails: reported once, with the job's tags.
    hooks = script[: script.index("timing = Timing()")]
    failing = hooks + textwrap.dedent("""
        import logging
        logging.getLogger("jobengine").setLevel(logging.CRITICAL)  # the worker's traceback line is not asked for
        engine = Engine.from_settings(Settings(database="./failing.db"), middleware=[ErrorReporting()])

        @engine.task(max_attempts=1)
        async def resize(ctx: JobContext, image: str) -> str:
            raise ValueError(image)

        async def main() -> None:
            async with engine:
                worker = engine.worker()
                running = asyncio.create_task(worker.run())
                job = await engine.wait_for((await resize.enqueue("cat.png")).id, timeout=60)
                worker.stop()
                await running
                print(job.state.value, job.id)

        asyncio.run(main())
    """)
    reported, ended = _run(failing, tmp_path).splitlines()
    state, job_id = ended.split()
    assert state == "dead"
    assert reported == f"reported ValueError with tags {{'task': 'resize', 'job_id': '{job_id}', 'attempt': '1'}}"
