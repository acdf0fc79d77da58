"""A real S3-compatible server for the tests: moto's (``python -m moto.server``) on a free loopback port.

Started once per test session (per xdist worker) by :func:`s3_server`; each test takes a bucket of its own
(:func:`new_bucket`). When moto (the ``dev`` extra) or boto3 is missing, or the server does not answer, the
test is skipped with the reason, and fails under ``CI`` (:func:`support.services.unavailable`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from support.services import HOST, unavailable

#: moto accepts any credentials; these keep boto3 from looking for real ones.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """The endpoint URL of a moto S3 server that lives for the session."""
    for module in ("boto3", "moto"):
        if importlib.util.find_spec(module) is None:
            unavailable(f"S3 tests need {module} (the dev extra: pip install -e '.[dev]')")
    port = _free_port()
    log = open(os.devnull, "wb")  # noqa: SIM115 - closed below, after the server
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)], stdout=log,
                            stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not _answers(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                unavailable(f"moto S3 server did not start on {HOST}:{port} (exit {proc.poll()})")
            time.sleep(0.05)
        yield f"http://{HOST}:{port}"
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        if proc.poll() is None:
            proc.kill()
        log.close()


@pytest.fixture
def s3_endpoint(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The moto endpoint, with AWS credentials for it in the environment (where boto3 reads them)."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    return s3_server


def client(endpoint: str) -> Any:
    import boto3

    return boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing").client(
        "s3", endpoint_url=endpoint, region_name="us-east-1"
    )


def new_bucket(endpoint: str) -> str:
    name = f"jobengine-{uuid.uuid4().hex[:12]}"
    client(endpoint).create_bucket(Bucket=name)
    return name
