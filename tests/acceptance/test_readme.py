"""Every shell and Python example of README.md, run as written against a live ``jobengine up``.

The README's fenced blocks are read in order. Each names its language: ``sh`` blocks run one command at a
time in bash, ``python`` blocks as a script, both in one temp dir (the user's project) with ``jobengine``
on the PATH and no ``JOBENGINE_*`` variable of the calling environment. A block is left out only by a
marker on the line before it, ``<!-- readme-test: skip: <why> -->``, which the reader of the README source
sees, and which this test requires to give a reason.

What the README leaves to its reader is filled in, and only that:

- ``localhost:8080`` and ``http://jobs.internal:8080`` are the live server's address (``up`` binds a free
  port, as other tests run beside this one);
- ``$KEY`` is what the README's ``keys create`` prints, ``$DEV`` the dev key ``up`` prints, ``$JOB_ID`` the
  id the last ``enqueue`` printed, ``$REVIEWER`` and ``$WORKER_KEY`` keys of scope ``packs:approve`` and
  ``worker``;
- ``myproject.jobs:engine``, ``prod.yaml`` and ``./hello-pack`` are files of the user's project, written
  here (:data:`PROJECT`);
- ``curl`` runs with ``-sS --fail-with-body``, so an HTTP error fails the command.

A command that serves or works until stopped (``jobengine up``, ``worker``, ``serve``, ``curl -N``) runs
until it shows it is working (:data:`LONG_RUNNING`), then gets SIGTERM: jobengine's commands must exit 0.
What the README says a command prints is checked (:data:`PRINTS`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.processes import Processes
from support.services import unavailable
from support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MARKER = re.compile(r"<!--\s*readme-test:\s*(.*?)\s*-->")
SHELL = {"sh", "bash", "shell", "console"}
#: The blocks a marker leaves out, reviewed: each runs until stopped, runs the whole suite, or needs a run
#: that a worker must finish while the README's workers only start (the pack simulation).
SKIPPED = {
    "make up",
    "make test",
    "jobengine worker --packs hello@1.1.0 --pending-packs  # a worker for the simulation\n"
    "jobengine pack simulate hello@1.1.0 --task greet --key $REVIEWER\n"
    "jobengine pack approve hello@1.1.0 --key $REVIEWER --yes  # prints the diff; without --yes, asks first",
}
#: Languages shown and never run: data, not commands.
NOT_RUN = {"yaml", "json", "toml", "text"}

#: The user's project the README's commands name.
PROJECT = {
    "myproject/__init__.py": "",
    "myproject/jobs.py": '''"""The user's tasks: the README's `--app myproject.jobs:engine`."""
from jobengine import Engine, JobContext, Settings

engine = Engine.from_settings(Settings.load())


@engine.task()
async def hello(ctx: JobContext) -> str:
    return f"hello {ctx.payload.get('name', 'you')}"


@engine.task()
async def send_welcome(ctx: JobContext) -> str:
    return f"sent to {ctx.payload['email']}"


@engine.task(queue="reports")
async def report(ctx: JobContext) -> str:
    return "reported"
''',
    "prod.yaml": "worker_concurrency: 4\nlease_seconds: 20\n",
    "hello-pack/hello/__init__.py": "",
    "hello-pack/hello/tasks.py": "async def greet(ctx):\n    return 'hello ' + ctx.payload.get('who', 'you')\n",
    "hello-pack/jobengine-pack.yaml": "name: hello\nversion: 1.0.0\ndescription: Greets people\ntasks:\n"
    "  greet:\n    entry: hello.tasks:greet\n    queue: packs\n",
}

#: Command (its start, after any VAR=value) -> what its output shows once it is working.
LONG_RUNNING = {
    "jobengine up": "API on",
    "jobengine serve": "jobengine serve",
    "jobengine worker --packs": "started on queues",
    "jobengine worker": "started on queues",
    "curl -N": "data:",
}

#: Command (a regular expression on it) -> what the README says it prints (one on its stdout).
PRINTS = {
    r"^jobengine keys create": r"^je_\w+_\S+",
    r"^jobengine enqueue": r"^[0-9a-f-]{36}$",
    r"^jobengine jobs show": r"attempts|phases|events",
    r"^jobengine workers": re.escape(socket.gethostname()[:8]),  # a live worker's host (a long name is cut)
    r"^jobengine schedules create": r"created schedule",
    r"^jobengine schedules simulate \S+ --count 5": r"(?s)(\d{4}-\d\d-\d\d \d\d:\d\d.*){5}",
    r"^jobengine pack build": r"hello-1\.0\.0\.tar\.gz",
    r"^jobengine pack push": r"pending_approval",
    r"^curl .*/api/v1/jobs$": r'"id"',
    r"^curl .*/webhooks/inbound": r'"secret"',
}


@dataclass(frozen=True)
class Block:
    line: int  # 1-based, of the opening fence
    language: str
    text: str
    skip: str | None  # the reason a marker gives


def blocks(text: str) -> Iterator[Block]:
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if opening is None:
            i += 1
            continue
        indent, language = opening.groups()
        end = i + 1
        while lines[end].strip() != "```":
            end += 1
        body = "\n".join(line.removeprefix(indent) for line in lines[i + 1 : end])
        marker = MARKER.search(lines[i - 1]) if i else None
        skip = None
        if marker is not None:
            assert marker.group(1).startswith("skip:") and marker.group(1)[5:].strip(), (
                f"README.md:{i}: a readme-test marker is `skip: <why>`"
            )
            skip = marker.group(1)[5:].strip()
        yield Block(i + 1, language, body, skip)
        i = end + 1


def commands(script: str) -> Iterator[str]:
    """The commands of a shell block: lines joined at a trailing backslash, comment lines left out."""
    pending = ""
    for line in script.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        command = (pending + line).strip()
        pending = ""
        if command and not command.startswith("#"):
            yield command


def without_comment(command: str) -> str:
    """The command without its trailing ``# comment`` (none of the README's quoted strings holds one)."""
    return re.sub(r"\s+#\s.*$", "", command)


class Readme(Processes):
    """The user's project directory and shell, with the live server's address and the keys in hand."""

    def __init__(self, cwd: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBENGINE_")}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = str(cwd)  # `--app myproject.jobs:engine` from any process of the project
        super().__init__(cwd, env, cwd)
        self.url = ""
        self.count = 0

    def jobengine(self, *args: str) -> str:
        done = subprocess.run(["jobengine", *args], cwd=self.cwd, env=self.env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120)  # fmt: skip
        assert done.returncode == 0, f"jobengine {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    def as_run(self, command: str) -> str:
        """``command`` with the server's address and curl's failure flags, the only edits made to it."""
        hostport = self.url.removeprefix("http://")
        command = command.replace("http://jobs.internal:8080", self.url).replace("localhost:8080", hostport)
        return re.sub(r"^curl ", "curl -sS --fail-with-body ", command)

    def shell(self, command: str, block: Block) -> None:
        where = f"README.md:{block.line}: `{command}`"
        bare = re.sub(r"^(\w+=\S+\s+)+", "", command)
        for start, ready in LONG_RUNNING.items():
            if re.match(re.escape(start) + r"(\s|$)", bare):
                self.until_ready(command, ready, where, jobengine=start != "curl -N")
                return
        done = subprocess.run(["bash", "-c", self.as_run(command)], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)  # fmt: skip
        said = f"{where} exited {done.returncode}\n--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}"
        assert done.returncode == 0, said
        assert "Traceback" not in done.stderr, said
        for pattern, printed in PRINTS.items():
            if re.search(pattern, without_comment(bare)):
                assert re.search(printed, done.stdout.strip(), re.MULTILINE), f"{said}\n(expected {printed!r})"
        if bare.startswith("jobengine keys create"):
            self.env["KEY"] = done.stdout.split()[0]
        if bare.startswith("jobengine enqueue"):
            self.env["JOB_ID"] = done.stdout.strip()

    def until_ready(self, command: str, ready: str, where: str, *, jobengine: bool) -> None:
        self.count += 1
        p = self.run(f"long{self.count}", ["bash", "-c", "exec " + self.as_run(command)])

        def shown() -> bool:
            if not jobengine and ready not in self.output(p):  # a stream of new events: make one, as $KEY
                self.enqueue_as_key()
            return ready in self.output(p) or p.poll() is not None

        wait_for(shown, 180, f"{where} to print {ready!r}", every=0.5)
        assert p.poll() is None, f"{where} exited {p.returncode}: {self.output(p)}"
        if "--packs hello@1.0.0" in command:  # "runs task hello@1.0.0:greet"
            job = self.jobengine("enqueue", "hello@1.0.0:greet", "--payload", '{"who": "Ada"}').strip()
            done = wait_for(lambda: self.finished(job), 180, f"{where} to run hello@1.0.0:greet", every=0.5)
            assert (done["state"], done["result"]) == ("succeeded", "hello Ada"), done
        p.send_signal(signal.SIGTERM)
        code = p.wait(timeout=60)
        if jobengine:  # SIGTERM stops every jobengine process gracefully, with exit code 0
            assert code == 0, f"{where} exited {code} on SIGTERM: {self.output(p)}"
            assert "Traceback" not in self.output(p), self.output(p)

    def finished(self, job_id: str) -> dict[str, Any] | None:
        job: dict[str, Any] = json.loads(self.jobengine("jobs", "show", job_id, "--json"))
        return job if job["state"] in ("succeeded", "dead", "cancelled") else None

    def enqueue_as_key(self) -> None:
        headers = {"Authorization": f"Bearer {self.env['KEY']}"}
        answer = httpx.post(f"{self.url}/api/v1/jobs", json={"task": "hello"}, headers=headers, timeout=60)
        assert answer.status_code == 201, answer.text

    def python(self, block: Block) -> None:
        """Run the block as a script, or with pytest when it defines tests (a user's test file). One that runs
        a worker runs until a job it enqueued succeeded in the database it names, then gets SIGTERM (which the
        README says ends a worker with exit code 0)."""
        self.count += 1
        script = self.cwd / f"readme_{block.line}.py"
        script.write_text(block.text)
        where = f"README.md:{block.line} (python)"
        if re.search(r"^(async )?def test_", block.text, re.MULTILINE):  # a test file: pytest runs it
            p = self.run(f"python{self.count}", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                                 str(script)])  # fmt: skip
            assert p.wait(timeout=240) == 0, f"{where}: {self.output(p)}"
            assert re.search(r"\b\d+ passed\b", self.output(p)), f"{where}: {self.output(p)}"
            return
        p = self.run(f"python{self.count}", [sys.executable, str(script)])
        if "run_worker" in block.text:
            database = re.search(r'database="([^"]+)"', block.text)
            assert database is not None, f"{where}: a worker example names its database"
            path = database.group(1)

            def succeeded() -> bool:
                assert p.poll() is None, f"{where} exited {p.returncode}: {self.output(p)}"
                if not (self.cwd / path).exists():
                    return False
                return bool(json.loads(self.jobengine("jobs", "list", "--db", path, "--state", "succeeded", "--json")))

            wait_for(succeeded, 180, f"{where}: a job it enqueued to succeed", every=0.5)
            failed = json.loads(self.jobengine("jobs", "list", "--db", path, "--state", "failed,dead", "--json"))
            assert not failed, f"{where}: {failed}"
            p.send_signal(signal.SIGTERM)
        code = p.wait(timeout=120)
        assert code == 0, f"{where} exited {code}: {self.output(p)}"
        assert "Traceback" not in self.output(p), self.output(p)


@pytest.fixture
def readme(tmp_path: Path) -> Iterator[Readme]:
    if shutil.which("curl") is None:
        unavailable("curl is not installed: the README's HTTP examples use it")
    for name, text in PROJECT.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    runner = Readme(tmp_path)
    yield runner
    runner.stop_all()


def test_every_block_names_its_language_and_skips_give_a_reason() -> None:
    found = list(blocks(README.read_text()))
    assert len(found) >= 8
    unknown = [(b.line, b.language) for b in found if b.language not in SHELL | {"python"} | NOT_RUN]
    assert not unknown, f"README.md blocks without a language this test knows (sh, python, yaml...): {unknown}"
    skipped = {b.text.strip() for b in found if b.skip is not None}
    assert skipped == SKIPPED, "a block left out of the README test is reviewed here: add it to SKIPPED"


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_readme_runs_as_written(readme: Readme) -> None:
    up = readme.run("up", ["jobengine", "up"], env={"JOBENGINE_API_PORT": "0"})
    found = wait_for(lambda: re.search(r"API on (http://127\.0\.0\.1:\d+) .*dev key (je_\S+)", readme.output(up)),
                     180, "the API of `jobengine up`")  # fmt: skip
    readme.url = found.group(1)
    # The README's own commands serve on a port of their own, beside the live one.
    readme.env.update(DEV=found.group(2), JOBENGINE_API_PORT="0", JOBENGINE_URL=readme.url)
    readme.env["REVIEWER"] = readme.jobengine("keys", "create", "--scope", "packs:approve").split()[0]
    readme.env["WORKER_KEY"] = readme.jobengine("keys", "create", "--scope", "worker").split()[0]
    ran = 0
    for block in blocks(README.read_text()):
        if block.skip is not None or block.language in NOT_RUN:
            continue
        if block.language == "python":
            readme.python(block)
            ran += 1
            continue
        for command in commands(block.text):
            readme.shell(command, block)
            ran += 1
    assert ran >= 25
    assert up.poll() is None, readme.output(up)
    up.send_signal(signal.SIGTERM)
    assert up.wait(timeout=60) == 0, readme.output(up)
    assert "Traceback" not in readme.output(up)
