"""``jobengine keys``, ``jobengine serve`` and the API of ``jobengine up``, as real processes."""

from __future__ import annotations

import re
import signal
import subprocess

import httpx

from .test_cli import Cli, assert_one_error_line, cli, wait_for

__all__ = ["cli"]  # the fixture, shared with test_cli.py


def test_keys_create_list_and_revoke(cli: Cli) -> None:
    created = cli.json("keys", "create", "--tenant", "acme", "--scope", "jobs:read", "--scope", "worker",
                       "--name", "ci")  # fmt: skip
    assert created["key"].startswith(f"je_{created['id']}_")
    assert (created["tenant"], created["scopes"], created["revoked_at"]) == ("acme", ["jobs:read", "worker"], None)
    plain = cli("keys", "create", "--admin").stdout  # tenant default, scope admin; the key is on the first line
    assert re.match(r"^je_[0-9a-f]{12}_\S+\n", plain)
    listed = cli.json("keys", "list")
    assert [k["tenant"] for k in listed] == ["acme", "default"] and all("key" not in k for k in listed)
    assert created["key"] not in cli("keys", "list").stdout
    assert [k["id"] for k in cli.json("keys", "list", "--tenant", "acme")] == [created["id"]]
    assert "revoked" in cli("keys", "revoke", created["id"]).stdout
    assert cli.json("keys", "list", "--tenant", "acme")[0]["revoked_at"] is not None
    assert_one_error_line(cli("keys", "revoke", "000000000000", expect=1), "api key", "not found")
    assert_one_error_line(cli("keys", "create", "--scope", "root", expect=2), "scopes", "root")
    # An admin key is never the default: a bare command names the choice and creates nothing.
    assert_one_error_line(cli("keys", "create", expect=2), "scope: give at least one --scope", "--admin")
    assert_one_error_line(cli("keys", "create", "--admin", "--scope", "worker", expect=2), "not both")
    assert len(cli.json("keys", "list")) == 2


def test_serve_refuses_a_public_address_without_keys(cli: Cli) -> None:
    refused = cli("serve", "--host", "0.0.0.0", "--port", "0", expect=2)
    assert_one_error_line(refused, "api_host", "no API key")


def test_serve_answers_and_stops_on_sigterm(cli: Cli) -> None:
    key = cli.json("keys", "create", "--tenant", "acme", "--admin")["key"]
    server = cli.spawn("server", "serve", "--port", "0")
    url = wait_for(lambda: re.search(r"http://127\.0\.0\.1:\d+", cli.output(server)), 120, "the server").group(0)
    # A first request may build the OpenAPI document or a page under a busy suite: more than httpx's 5 s.
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        assert api.get("/healthz").json()["status"] == "ok"
        assert api.get("/readyz").status_code == 200
        assert api.post("/api/v1/jobs", json={"task": "hello"}).status_code == 201
        assert api.get("/openapi.json").json()["info"]["title"] == "jobengine"
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=20) == 0, cli.output(server)
    assert "Traceback" not in cli.output(server)


def test_up_prints_a_dev_key_that_works_and_keeps_it(cli: Cli) -> None:
    subprocess.run(["git", "init", "-q"], cwd=cli.cwd, check=True)  # the user's project
    (cli.cwd / "jobengine.yaml").write_text("api_port: 0\npoll_interval: 0.2\n")
    first = cli.spawn("up", "up")
    pattern = r"API on (http://127\.0\.0\.1:\d+) .*dev key (je_\S+)"
    found = wait_for(lambda: re.search(pattern, cli.output(first)), 120, "the API of `up`")
    url, key = found.group(1), found.group(2)
    # A first request may build the OpenAPI document or a page under a busy suite: more than httpx's 5 s.
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        jobs = wait_for(lambda: api.get("/api/v1/jobs").json()["items"], 120, "the demo jobs")
        assert {j["tenant"] for j in jobs} == {"default"}
        # The dashboard is served at / (issue 9): without a session, its login page.
        page = api.get("/", follow_redirects=True)
        assert page.status_code == 200 and 'name="key"' in page.text and str(page.url).endswith("/login?next=%2F")
    first.send_signal(signal.SIGINT)
    assert first.wait(timeout=30) == 0, cli.output(first)
    (cli.cwd / "jobengine.db").write_bytes(b"")  # where the default database used to be: not opened, named
    again = cli.spawn("up-again", "up")
    second = wait_for(lambda: re.search(pattern, cli.output(again)), 120, "the second start")
    assert "./jobengine.db is not used: the database is .jobengine/jobengine.db" in cli.output(again)
    assert second.group(2) == key  # the same dev key: kept beside the database, readable by its owner only
    assert (cli.cwd / ".jobengine" / "jobengine.db.devkey").stat().st_mode & 0o077 == 0
    again.send_signal(signal.SIGTERM)
    assert again.wait(timeout=30) == 0, cli.output(again)
    # The database, the dev key and the rest are in .jobengine/, which its own .gitignore hides from git.
    assert {p.name for p in (cli.cwd / ".jobengine").iterdir()} >= {"jobengine.db", "jobengine.db.devkey", ".gitignore"}
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=cli.cwd, check=True,
                            capture_output=True, text=True).stdout  # fmt: skip
    assert set(status.splitlines()) <= {"?? jobengine.yaml", "?? jobengine.db", "?? up.out", "?? up-again.out"}, status
