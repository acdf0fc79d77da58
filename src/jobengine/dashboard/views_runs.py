"""Runs in their three modes on the dashboard: a simulate run's diff (on its page), and manual starts that
show their preview before the user confirms: a run request form (``/runs/new``) and a schedule's trigger
(``/schedules/{ref}/trigger``). A preview writes nothing; only the confirming POST does."""

from __future__ import annotations

import json
from typing import Any, Final

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from jobengine.core.models import Json
from jobengine.core.run_diff import ItemChange
from jobengine.core.run_modes import RunMode
from jobengine.core.run_requests import RunRequest
from jobengine.core.runs import Run
from jobengine.dashboard import session as sess
from jobengine.dashboard.base import HtmlRoute, engine, render, see_other
from jobengine.dashboard.session import DashboardError, Session
from jobengine.errors import InvalidJob, InvalidSchedule

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

#: Entries of a diff shown per page.
DIFF_PAGE: Final = 50
#: Jobs of a schedule's next run shown in a trigger's preview, and fire times listed.
SAMPLE_JOBS: Final = 5
FIRE_TIMES: Final = 5
#: The fields of the run request form, as the form names them.
FIELDS: Final = ("task", "mode", "items", "source", "segment_size", "version", "priority", "run_id", "reason")


def _actor(session: Session) -> str:
    return f"dashboard:{session.principal.key_id}"


def _int(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or len(raw) > 9:
        raise DashboardError(422, "must be a whole number", name)
    return int(raw)


# -- a simulate run's diff --------------------------------------------------------------------------
async def diff_values(request: Request, session: Session, run: Run) -> dict[str, Any]:
    """The diff section of a simulate run's page: counts first, then one page of the entries of the
    change asked for (``?change=``; every change but ``same`` by default), ``?dpage=`` for the next ones.
    Empty for a run of another mode; ``pending`` while the run has not ended."""
    if run.mode != RunMode.SIMULATE.value:
        return {}
    if not run.ended:
        return {"diff_pending": True}
    change = request.query_params.get("change", "").strip()
    if change and change not in {c.value for c in ItemChange}:
        raise DashboardError(422, f"one of {', '.join(c.value for c in ItemChange)}", "change")
    page = _int(request, "dpage", 1)
    diff = await engine(request).runs.diff(run.id, session.tenant)
    chosen = [e for e in diff.entries if (e.change.value == change if change else e.change is not ItemChange.SAME)]
    pages = max(1, -(-len(chosen) // DIFF_PAGE))
    page = min(max(page, 1), pages)
    return {
        "diff": diff, "diff_change": change, "diff_page": page, "diff_pages": pages, "diff_shown": len(chosen),
        "diff_entries": chosen[(page - 1) * DIFF_PAGE : page * DIFF_PAGE],
    }  # fmt: skip


# -- a run request, previewed then started ----------------------------------------------------------
def _items(text: str) -> list[Json]:
    """The items field: a JSON array, or one item per line (a line that reads as JSON is that value)."""
    text = text.strip()
    if text.startswith("["):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidSchedule("items", f"not a JSON array ({exc.msg} at character {exc.pos})") from None
        if not isinstance(value, list):
            raise InvalidSchedule("items", "must be a JSON array or one item per line")
        return value
    items: list[Json] = []
    for line in (raw.strip() for raw in text.splitlines()):
        if not line:
            continue
        try:
            items.append(json.loads(line))
        except ValueError:
            items.append(line)  # a bare word is a string item
    return items


def request_from(form: dict[str, str]) -> RunRequest:
    """The form as a RunRequest; raises InvalidSchedule naming the field (the page shows it, 422)."""
    size = form.get("segment_size", "").strip() or "100"
    if not size.isdigit() or len(size) > 9:
        raise InvalidSchedule("segment_size", "must be a whole number")
    # Mode and priority go in as text: RunRequest checks them, naming the field.
    fields: dict[str, Any] = {n: form.get(n, "").strip() or None for n in ("version", "run_id", "reason")}
    fields.update(mode=form.get("mode", "full"), priority=form.get("priority", "normal"))
    return RunRequest(
        task=form.get("task", "").strip(), items=tuple(_items(form.get("items", ""))),
        source=form.get("source", "").strip() or "default", segment_size=int(size), **fields,
    )  # fmt: skip


def _form_values(form: dict[str, str]) -> dict[str, str]:
    return {n: form.get(n, "") for n in FIELDS}


@router.get("/runs/new")
async def new_run_page(request: Request) -> Response:
    """The run request form (``?task=&mode=`` fill it in)."""
    session = await sess.require(request, "schedules:write")
    form = {n: request.query_params.get(n, "")[:200] for n in FIELDS}
    return render(request, "run_new.html", session, {"form": form, "modes": [m.value for m in RunMode]})


@router.post("/runs/new/preview")
async def new_run_preview(request: Request) -> Response:
    """What the request in the form would do (counts, the cursor, a sample), with the button that starts
    it. Writes nothing."""
    session, form = await sess.action(request, "schedules:write")
    values: dict[str, Any] = {"form": _form_values(form), "modes": [m.value for m in RunMode]}
    try:
        run_request = request_from(form)
    except InvalidJob as exc:  # the form again, with the field at fault named above it
        return render(request, "run_new.html", session, {**values, "error": str(exc)}, 422)
    values["preview"] = await engine(request).runs.preview(run_request, tenant=session.tenant)
    return render(request, "run_new.html", session, values)


@router.post("/runs/new")
async def new_run_start(request: Request) -> Response:
    session, form = await sess.action(request, "schedules:write")
    if form.get("confirm") != "start":
        raise DashboardError(422, "preview the run, then confirm it", "confirm")
    run = await engine(request).runs.start(request_from(form), tenant=session.tenant, actor=_actor(session))
    return see_other(f"/runs/{run.id}", "run started")


# -- a schedule's trigger, previewed then confirmed -------------------------------------------------
@router.get("/schedules/{ref}/trigger")
async def trigger_preview(request: Request, ref: str) -> Response:
    """What triggering the schedule now makes (the jobs its next run would have, planners called dry) and
    its next fire times, with the form that confirms the trigger. Writes nothing."""
    session = await sess.require(request, "schedules:write")
    if not 1 <= len(ref) <= 200:
        raise DashboardError(404, f"no schedule {ref!r}", "schedule")
    eng = engine(request)
    schedule = await eng.schedules.get(ref, session.tenant)
    simulation = await eng.schedules.simulate(schedule.id, count=FIRE_TIMES, tenant=session.tenant)
    first = simulation.runs[0] if simulation.runs else None
    values = {
        "schedule": schedule, "simulation": simulation, "next_run": first,
        "sample": first.jobs[:SAMPLE_JOBS] if first else (), "items": sum(first.items) if first else 0,
        "reason": request.query_params.get("reason", "")[:1000],
    }  # fmt: skip
    return render(request, "trigger.html", session, values)
