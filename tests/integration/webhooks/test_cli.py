"""``jobengine webhooks …`` in-process (``main([...])``): create (SSRF refused with a clear one-line error,
nothing written), list, show, disable, enable, rotate-secret, deliveries, resend, delete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobengine.cli.main import main
from jobengine.core.ids import short_id


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_an_unknown_event_type_is_refused_naming_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    db = str(tmp_path / "cli.db")
    monkeypatch.setenv("JOBENGINE_WEBHOOK_ALLOW_HOSTS", "127.0.0.1/32")
    code, out, err = cli(capsys, "webhooks", "create", "--db", db, "--url", "http://127.0.0.1:9/x",
                         "--type", "job.dead", "--type", "job.exploded")  # fmt: skip
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: type: 'job.exploded' is not an event type (known: ") and "job.succeeded" in err
    code, out, err = cli(capsys, "webhooks", "create", "--db", db, "--url", "http://127.0.0.1:9/x",
                         "--type", "job.dead", "--type", "run.*", "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["filter"]["types"] == ["job.dead", "run.*"], err


def test_webhooks_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(tmp_path / "cli.db")
    monkeypatch.setenv("JOBENGINE_WEBHOOK_ALLOW_HOSTS", "127.0.0.1/32")
    code, out, err = cli(capsys, "webhooks", "create", "--db", db, "--url", "http://10.0.0.1/x", "--tenant", "acme")
    assert (
        code == 2 and err.strip().startswith("error: url:") and "refused" in err and len(err.strip().splitlines()) == 1
    )
    code, out, _ = cli(capsys, "webhooks", "list", "--db", db, "--json")
    assert code == 0 and json.loads(out) == []
    code, out, err = cli(capsys, "webhooks", "create", "--db", db, "--url", "http://127.0.0.1:9/x", "--tenant",
                         "acme", "--type", "job.*", "--json")  # fmt: skip
    assert code == 0, err
    created = json.loads(out)
    eid = created["id"]
    assert created["secret"].startswith("whsec_") and created["filter"]["types"] == ["job.*"]
    code, out, _ = cli(capsys, "webhooks", "show", eid, "--db", db, "--tenant", "acme", "--json")
    assert json.loads(out)["id"] == eid and "secret" not in json.loads(out)
    code, out, err = cli(capsys, "webhooks", "show", eid, "--db", db, "--tenant", "globex")
    assert code == 1 and eid in err and out == "", err  # another tenant's endpoint: not found
    code, out, _ = cli(capsys, "webhooks", "disable", eid, "--db", db, "--tenant", "acme", "--json")
    assert json.loads(out)["enabled"] is False
    code, out, _ = cli(capsys, "webhooks", "enable", eid, "--db", db, "--tenant", "acme", "--json")
    assert json.loads(out)["enabled"] is True
    code, out, _ = cli(capsys, "webhooks", "rotate-secret", eid, "--db", db, "--tenant", "acme", "--json")
    assert json.loads(out)["secret"] != created["secret"]
    code, out, _ = cli(capsys, "webhooks", "deliveries", "--db", db, "--tenant", "acme", "--json")
    assert code == 0 and json.loads(out) == []
    code, out, err = cli(capsys, "webhooks", "deliveries", "--db", db, "--tenant", "acme", "--state", "odd")
    assert code == 2 and err.startswith("error: state:"), err
    code, out, err = cli(capsys, "webhooks", "resend", "wd_nope", "--db", db, "--tenant", "acme")
    assert code == 1 and "wd_nope" in err
    code, out, _ = cli(capsys, "webhooks", "list", "--db", db)
    assert short_id(eid) in out and eid not in out and "types job.* · queues any · tasks any" in out
    code, out, _ = cli(capsys, "webhooks", "show", eid, "--db", db, "--tenant", "acme")
    assert "types job.* · queues any · tasks any" in out and "{" not in out, out  # not a Python dict's repr
    code, out, _ = cli(capsys, "webhooks", "delete", eid, "--db", db, "--tenant", "acme")
    assert code == 0
    code, out, _ = cli(capsys, "webhooks", "list", "--db", db, "--json")
    assert json.loads(out) == []
