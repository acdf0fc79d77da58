"""``jobengine pack build | push | list | versions | show | pull | simulate | approve | reject | deprecate |
archive``.

``build`` works on a local directory. The others talk to a server's registry over the HTTP API (``--url``,
env ``JOBENGINE_URL``, default ``http://127.0.0.1:8080``; ``--key``, env ``JOBENGINE_API_KEY``), so the
server knows who uploads and who approves (four-eyes). A refused request prints the server's problem as one
``error: <field>: <detail>`` line: exit 2 for a 4xx about the input (400, 409, 413, 415, 422), 1 otherwise.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.markup import escape
from rich.table import Table

from jobengine.cli import output
from jobengine.core import codec
from jobengine.errors import ConfigError, InvalidJob, JobEngineError
from jobengine.packs.archive import build as build_pack
from jobengine.settings import Settings, prepare_state_dir

pack_app = typer.Typer(
    name="pack", help="Build task packs and manage the pack registry.", no_args_is_help=True, rich_markup_mode=None
)

UrlOption = Annotated[str, typer.Option("--url", envvar="JOBENGINE_URL", help="The server's base URL.")]
KeyOption = Annotated[
    str | None, typer.Option("--key", envvar="JOBENGINE_API_KEY", help="API key (scopes packs:read/write/approve).")
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
DEFAULT_URL = "http://127.0.0.1:8080"

log = logging.getLogger("jobengine.packs")


class RegistryError(JobEngineError):
    pass


def _client(url: str, key: str | None) -> httpx.Client:
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"url: expected an http:// or https:// URL, got {url!r}")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=60.0)


def _check(r: httpx.Response) -> httpx.Response:
    if r.status_code < 400:
        return r
    try:
        problem: dict[str, Any] = r.json()
    except ValueError:
        problem = {}
    from jobengine.sdk.client import problem_detail  # the SDK (and its worker) loads only when a call fails

    field, detail = problem_detail(r.status_code, problem or {"detail": r.reason_phrase})
    if r.status_code in (400, 409, 413, 415, 422):
        raise InvalidJob(field or "request", f"{detail} (HTTP {r.status_code})")
    raise RegistryError(f"HTTP {r.status_code}: {field}: {detail}" if field else f"HTTP {r.status_code}: {detail}")


def _call(url: str, key: str | None, method: str, path: str, **kw: Any) -> httpx.Response:
    try:
        with _client(url, key) as c:
            return _check(c.request(method, path, **kw))
    except httpx.TransportError as exc:
        raise RegistryError(f"url: cannot reach {url} ({exc})") from None


def _print_version(v: dict[str, Any]) -> None:
    console = output.stdout()
    console.print(f"[bold]{escape(v['name'])}@{escape(v['version'])}[/bold]  {v['status']}"
                  + (f" ({escape(v['status_reason'])})" if v.get("status_reason") else ""))  # fmt: skip
    console.print(f"sha256:{v['sha256']}  {v['size']} bytes  uploaded by {escape(v['uploaded_by'])} "
                  f"at {v['uploaded_at']}")  # fmt: skip
    if v.get("approved_by"):
        console.print(f"approved by {escape(v['approved_by'])}")
    tasks = v.get("manifest", {}).get("tasks", {})
    for name, t in tasks.items():
        entry = t.get("entry") or ", ".join(p["entry"] for p in t.get("phases", []))
        console.print(f"  task {escape(name)}: {escape(entry)} (queue {escape(t.get('queue', 'default'))})")
    for h in v.get("history", []):
        reason = f" — {escape(h['reason'])}" if h.get("reason") else ""
        console.print(f"  [dim]{h['at']} {h['type']} by {escape(h['actor'])}{reason}[/dim]")


@pack_app.command("build")
def build(
    directory: Annotated[Path, typer.Argument(help="The pack's directory (holds jobengine-pack.yaml or .toml).")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Archive path [default: NAME-VERSION.tar.gz].")
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Build a pack reproducibly: the same directory always gives the same bytes and sha256."""
    built = build_pack(directory)
    target = out or Path(f"{built.manifest.name}-{built.manifest.version}.tar.gz")
    target.write_bytes(built.data)
    output.emit(json_out, {"path": str(target), "name": built.manifest.name, "version": built.manifest.version,
                           "sha256": built.sha256, "size": len(built.data), "files": built.files},
                f"built {escape(str(target))}: {built.manifest.name}@{built.manifest.version}, "
                f"{built.files} files, {len(built.data)} bytes, sha256:{built.sha256}")  # fmt: skip


@pack_app.command("push")
def push(
    archive: Annotated[Path, typer.Argument(help="A .tar.gz made by `jobengine pack build` (or a directory).")],
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Upload a pack; it waits for approval (pending_approval), or is marked invalid with the reason."""
    data = build_pack(archive).data if archive.is_dir() else archive.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    r = _call(url, key, "POST", "/api/v1/packs", content=data,
              headers={"Content-Type": "application/gzip", "X-Content-SHA256": digest})  # fmt: skip
    v = r.json()
    verb = "uploaded" if r.status_code == 201 else "already there:"
    output.emit(json_out, v, f"{verb} {escape(v['name'])}@{escape(v['version'])} sha256:{v['sha256']} ({v['status']}"
                + (f": {escape(v['status_reason'])}" if v.get("status_reason") else "") + ")")  # fmt: skip


@pack_app.command("list")
def list_packs(
    query: Annotated[str | None, typer.Argument(help="Only packs whose name or description contains this.")] = None,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    json_out: JsonFlag = False,
) -> None:
    """List (and search) packs."""
    items = _call(url, key, "GET", "/api/v1/packs", params={"q": query} if query else None).json()["items"]
    if json_out:
        output.print_json(items)
        return
    table = Table("name", "latest", "latest approved", "versions", "description", box=None)
    for p in items:
        table.add_row(escape(p["name"]), escape(p["latest"]), escape(p["latest_approved"] or "-"),
                      str(p["versions"]), escape(p["description"]))  # fmt: skip
    output.stdout().print(table)


@pack_app.command("versions")
def versions(
    name: Annotated[str, typer.Argument(help="The pack.")],
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    json_out: JsonFlag = False,
) -> None:
    """A pack's versions in semver order, with status and digest."""
    items = _call(url, key, "GET", f"/api/v1/packs/{name}/versions").json()["items"]
    if json_out:
        output.print_json(items)
        return
    table = Table("version", "status", "sha256", "uploaded", "by", box=None)
    for v in items:
        table.add_row(escape(v["version"]), v["status"], v["sha256"][:16], v["uploaded_at"], escape(v["uploaded_by"]))
    output.stdout().print(table)


def _split(ref: str) -> tuple[str, str]:
    name, sep, version = ref.partition("@")
    if not sep or not name or not version:
        raise InvalidJob("ref", f"expected name@version (like hello@1.2.0), got {ref!r}")
    return name, version


RefArg = Annotated[str, typer.Argument(help="name@version (or name@stable / name@latest).")]


@pack_app.command("show")
def show(ref: RefArg, url: UrlOption = DEFAULT_URL, key: KeyOption = None, json_out: JsonFlag = False) -> None:
    """A version: manifest, digest, size, status, approvals and history."""
    name, version = _split(ref)
    v = _call(url, key, "GET", f"/api/v1/packs/{name}/versions/{version}").json()
    if json_out:
        output.print_json(v)
        return
    _print_version(v)


@pack_app.command("pull")
def pull(
    ref: RefArg,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Where to write [default: NAME-VERSION.tar.gz].")
    ] = None,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
) -> None:
    """Download a version's archive (approved ones; reviewers with packs:approve may pull any) and verify it."""
    name, version = _split(ref)
    r = _call(url, key, "GET", f"/api/v1/packs/{name}/versions/{version}/download")
    expected = r.headers.get("x-content-sha256", "")
    actual = hashlib.sha256(r.content).hexdigest()
    if actual != expected:
        raise RegistryError(f"sha256: the download hashes to {actual}, the server says {expected}; not written")
    target = out or Path(f"{name}-{version}.tar.gz")
    target.write_bytes(r.content)
    output.stdout().print(f"wrote {escape(str(target))} ({len(r.content)} bytes, sha256:{actual})")


def _action(ref: str, which: str, url: str, key: str | None, reason: str | None, json_out: bool) -> None:
    name, version = _split(ref)
    body = {"reason": reason} if reason is not None else None
    v = _call(url, key, "POST", f"/api/v1/packs/{name}/versions/{version}/{which}", json=body).json()
    output.emit(json_out, v, f"{escape(v['name'])}@{escape(v['version'])} is {v['status']}")


ReasonOption = Annotated[str | None, typer.Option("--reason", help="Why (required to reject or deprecate).")]


def print_review(review: dict[str, Any]) -> None:
    """A version's newest simulation as the reviewer reads it: the counts, then the items that are not the
    same with their results side by side (capped), or why there is nothing to show and what to run."""
    console = output.stdout()
    if review["run_id"] is None:
        console.print(f"no simulation: {escape(review['name'])}@{escape(review['version'])} has not been "
                      "simulated, so nothing shows what it changes")  # fmt: skip
        console.print(f"  simulate it first: {escape(review['command'])}")
        return
    console.print(f"simulation: {escape(review['hint'])}")
    entries = review["entries"]
    if not entries:
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("ITEM", "CHANGE", "BEFORE (last run)", "AFTER (this version)"):
        table.add_column(column, overflow="fold")
    for e in entries:
        cells = [escape(codec.dumps(e[k], "result")[:80]) for k in ("item", "before", "after")]
        table.add_row(cells[0], e["change"], *cells[1:])
    console.print(table)
    counts = review["counts"]
    shown, total = len(entries), counts["changed"] + counts["new"] + counts["gone"]
    if shown < total:
        console.print(f"  ... {total - shown} more (jobengine runs diff {review['run_id']})")


YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Approve after showing the diff without asking.")]


@pack_app.command("approve")
def approve(
    ref: RefArg, yes: YesOption = False, url: UrlOption = DEFAULT_URL, key: KeyOption = None, json_out: JsonFlag = False
) -> None:
    """Approve a pending version (scope packs:approve; with four-eyes, not the uploader's key). Shows the diff
    of its newest simulation first (`jobengine pack simulate`), then asks (--yes: does not ask)."""
    name, version = _split(ref)
    review = _call(url, key, "GET", f"/api/v1/packs/{name}/versions/{version}/simulation").json()
    if not json_out:
        print_review(review)
    if not yes:
        if not sys.stdin.isatty():
            raise InvalidJob("yes", f"pass --yes to approve {name}@{version} after reading its simulation above")
        if not typer.confirm(f"approve {name}@{version}?", err=True):
            output.stdout().print("nothing done")
            raise typer.Exit(1)
    v = _call(url, key, "POST", f"/api/v1/packs/{name}/versions/{version}/approve").json()
    output.emit(json_out, {**v, "simulation": review}, f"{escape(v['name'])}@{escape(v['version'])} is {v['status']}")


@pack_app.command("simulate")
def simulate(
    ref: RefArg,
    task: Annotated[str | None, typer.Option("--task", help="The task to simulate (when the pack has more).")] = None,
    source: Annotated[str, typer.Option("--source", help="The input source of the runs.")] = "default",
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Simulate a pending version on the inputs of the last full run of its task (no effects, no webhooks, no
    cursor moved); `jobengine pack approve` then shows the diff (scope packs:approve)."""
    name, version = _split(ref)
    body: dict[str, Any] = {"source": source} | ({"task": task} if task is not None else {})
    run = _call(url, key, "POST", f"/api/v1/packs/{name}/versions/{version}/simulate", json=body).json()
    label = f"{escape(name)}@{escape(version)}"
    output.emit(json_out, run, f"simulate run {run['id']} of {label} over {run['items']} items is {run['state']}; "
                f"once it ended: jobengine pack approve {label}")  # fmt: skip


@pack_app.command("reject")
def reject(ref: RefArg, reason: ReasonOption = None, url: UrlOption = DEFAULT_URL, key: KeyOption = None,
           json_out: JsonFlag = False) -> None:  # fmt: skip
    """Reject a pending version, with a reason."""
    _action(ref, "reject", url, key, reason, json_out)


@pack_app.command("deprecate")
def deprecate(ref: RefArg, reason: ReasonOption = None, url: UrlOption = DEFAULT_URL, key: KeyOption = None,
              json_out: JsonFlag = False) -> None:  # fmt: skip
    """Deprecate an approved version, with a reason: jobs already enqueued run, new ones warn."""
    _action(ref, "deprecate", url, key, reason, json_out)


@pack_app.command("archive")
def archive(ref: RefArg, reason: ReasonOption = None, url: UrlOption = DEFAULT_URL, key: KeyOption = None,
            json_out: JsonFlag = False) -> None:  # fmt: skip
    """Archive a deprecated, rejected or invalid version: for good, never published again."""
    _action(ref, "archive", url, key, reason, json_out)


# -- workers that run packs (``jobengine worker --packs``) ------------------------------------------------
def cache_dir(settings: Settings) -> Path:
    """``packs_cache_dir``, else ``pack-cache`` in the state directory."""
    if settings.packs_cache_dir:
        return Path(settings.packs_cache_dir).expanduser()
    return prepare_state_dir(settings) / "pack-cache"


async def load_local(engine: Any, refs: tuple[str, ...], *, pending: bool = False) -> None:
    """Load approved packs from the worker's own database into ``engine.tasks`` (before its worker is built);
    ``pending``: versions awaiting approval too, for their simulations."""
    from jobengine.packs.loader import RegistryFetcher, load_packs

    fetcher = RegistryFetcher(engine.packs, pending=pending)
    loaded = await load_packs(engine.tasks, fetcher, refs, cache_dir(engine.settings))
    _report(loaded)


async def load_remote(
    tasks: Any, url: str, key: str | None, refs: tuple[str, ...], directory: Path, *, pending: bool = False
) -> None:
    """Load approved packs over the HTTP API (scope packs:read) into the task registry ``tasks``;
    ``pending``: versions awaiting approval too, for their simulations (scope packs:simulate as well)."""
    from jobengine.packs.loader import HttpFetcher, load_packs

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=60.0) as client:
        _report(await load_packs(tasks, HttpFetcher(client, pending=pending), refs, directory))


def _report(loaded: Any) -> None:
    for p in loaded:
        log.info("pack %s@%s (sha256:%s…): %d tasks from %s", p.name, p.version, p.sha256[:12], len(p.tasks), p.path,
                 extra={"pack": f"{p.name}@{p.version}", "sha256": p.sha256})  # fmt: skip
