"""The runs table and what is done to runs from it: edit labels, archive, delete.

Views parse input with a form, call a selector or a service, render. A run is found through
`run_get_for_user` / `run_list_for_user` (a run of a project the user is not in is a 404), and changed
only by whoever `run_change_check` allows (its owner while a member, a project admin, staff: a viewer
gets a 403 that says why).
"""

from __future__ import annotations

import datetime as dt
from urllib.parse import quote, urlsplit

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from webapp.projects.selectors import projects_for_user, role_in, roles_of
from webapp.runs.access import can_change, run_change_check, runs_change_check
from webapp.runs.ingest.retention import storage_label
from webapp.runs.launch.forms import RunDetailsForm
from webapp.runs.models import Run
from webapp.runs.selectors import (
    DEFAULT_SORT,
    run_get_for_user,
    run_list_filtered,
    run_list_for_user,
    runs_page,
)
from webapp.runs.services import RunsActive, run_move, run_update_details, runs_delete, runs_set_archived
from webapp.runs.table.forms import RunFilterForm

PAGE_SIZE = 50
MAX_SELECTED = 200
# The first click on a column sorts numbers and dates high to low, text A to Z.
DESCENDING_FIRST = {"steps", "last_reward", "best_reward", "last_eval_reward", "duration", "gpu_hours", "storage",
                    "created"}
ACTIONS = {
    "archive": ("Archive", "Archived runs leave the table (tick 'Show archived' to see them); nothing is deleted."),
    "unarchive": ("Unarchive", "The runs return to the table."),
    "delete": ("Delete", "Deletes the runs with every step, rollout and group they recorded, and their "
                         "directories (event log, checkpoints). This cannot be undone."),
}


@require_http_methods(["GET"])
def run_list(request):
    """`/` and `/runs/`: the runs table, 50 rows a page."""
    filters = RunFilterForm(request.GET)
    projects = list(projects_for_user(request.user))
    if not filters.is_valid():
        return render(request, "runs/list.html", {"filters": filters, "runs": [], "headers": {}, "projects": projects},
                      status=400)
    wanted = filters.cleaned_data["project"]
    project = next((p for p in projects if p.name.lower() == wanted.lower()), None) if wanted else None
    if wanted and project is None:  # a project the user is not in is as absent as a missing one
        filters.add_error("project", f"No project {wanted!r} of yours: choose one of the list.")
        return render(request, "runs/list.html", {"filters": filters, "runs": [], "headers": {}, "projects": projects},
                      status=404)
    runs = run_list_filtered(request.user, **filters.selector_kwargs())
    page = Paginator(runs, PAGE_SIZE).get_page(filters.cleaned_data["page"] or 1)
    rows = runs_page(runs, page.start_index() - 1, PAGE_SIZE) if page.paginator.count else []
    for run in rows:  # formatted here: a template filter per cell costs more than the queries
        run.duration_text = duration_text(run.elapsed)
        run.gpu_hours = gpu_hours(run.gpu_elapsed) if run.started_at else None
        run.rewards_text = [number_text(v, 3) for v in (run.last_reward, run.best_reward, run.last_eval_reward)]
        run.gpu_hours_text = number_text(run.gpu_hours, 2)
        run.storage_text = storage_label(run.storage_bytes)
    roles = roles_of(request.user)  # one query: the row's edit link and the bulk actions ask what their views ask
    for run in rows:
        run.can_change = can_change(request.user, run, role_in(roles, run.project_id))
    return render(request, "runs/list.html", {
        "filters": filters, "runs": rows, "page": page, "headers": sort_headers(filters.cleaned_data["sort"]),
        "sorted_by": filters.cleaned_data["sort"], "here": request.get_full_path(), "projects": projects,
        "project": project, "changeable": any(run.can_change for run in rows),
        "here_quoted": quote(request.get_full_path(), safe=""),
    })


def sort_headers(current: str) -> dict[str, dict[str, str]]:
    """For each sortable column: the `sort` value its header link asks for, and an arrow on the
    column the table is sorted by (a second click reverses it)."""
    headers = {}
    for key in ("name", "state", "task", "steps", "last_reward", "best_reward", "last_eval_reward", "duration",
                "gpu_hours", "storage", "owner", "created"):
        if current.removeprefix("-") == key:
            descending = current.startswith("-")
            headers[key] = {"sort": key if descending else f"-{key}", "arrow": " ▼" if descending else " ▲",
                            "aria": "descending" if descending else "ascending"}
        else:
            headers[key] = {"sort": f"-{key}" if key in DESCENDING_FIRST else key, "arrow": "", "aria": "none"}
    headers["default"] = {"sort": DEFAULT_SORT}
    return headers


def duration_text(elapsed: dt.timedelta | None) -> str:
    """`2d 3h`, `1h 05m`, `4m 09s`, `12s`, `<1s` (a run trained elsewhere may log a few steps in
    milliseconds: "0s" read as if it had not run); an em dash before the run starts."""
    if elapsed is None:
        return "—"
    if dt.timedelta(0) < elapsed < dt.timedelta(seconds=1):
        return "<1s"
    seconds = max(0, int(elapsed.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {seconds:02d}s"
    return f"{seconds}s"


def number_text(value: float | None, places: int) -> str:
    return "—" if value is None else f"{value:.{places}f}"


def gpu_hours(gpu_elapsed: dt.timedelta | None) -> float:
    return 0.0 if gpu_elapsed is None else max(0.0, gpu_elapsed.total_seconds() / 3600)


def _next_url(request, fallback: str) -> str:
    """Where to go after a POST: the page it came from when that is on this site."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                  require_https=request.is_secure()):
        return target
    return fallback


@require_http_methods(["GET", "POST"])
def run_edit(request, run_id: int):
    """Name, tags and notes of a run, in any state. Errors are shown beside their fields."""
    run = run_get_for_user(request.user, run_id)
    run_change_check(request.user, run)
    detail = reverse("runs:detail", args=[run.pk])
    if request.method == "POST":
        form = RunDetailsForm(request.POST, user=request.user, run=run)
        if form.is_valid():
            moved_to = form.cleaned_data.pop("project")
            run_update_details(run, **form.cleaned_data)
            if moved_to is not None and moved_to.pk != run.project_id:
                run_move(run, moved_to)
                messages.success(request, f"Saved {run}: it is now in project {moved_to.name}.")
            else:
                messages.success(request, f"Saved the name, tags and notes of {run}.")
            return redirect(_next_url(request, detail))
        status = 400
    else:
        form = RunDetailsForm(initial={"name": run.name, "tags": run.tags, "notes": run.notes,
                                       "project": run.project_id}, user=request.user, run=run)
        status = 200
    return render(request, "runs/edit.html", {"run": run, "form": form, "next": _next_url(request, detail),
                                              "move_choices": list(form.fields["project"].queryset)}, status=status)


@require_POST
def run_archive_view(request, run_id: int):
    return _set_archived(request, run_id, True)


@require_POST
def run_unarchive_view(request, run_id: int):
    return _set_archived(request, run_id, False)


def _set_archived(request, run_id: int, archived: bool):
    run = run_get_for_user(request.user, run_id)
    run_change_check(request.user, run)
    runs_set_archived([run], archived)
    messages.success(request, f"{run} is {'archived' if archived else 'back in the runs table'}.")
    return redirect(_next_url(request, reverse("runs:detail", args=[run.pk])))


@require_http_methods(["GET", "POST"])
def runs_action(request):
    """`/runs/actions?action=archive|unarchive|delete&runs=1&runs=2`: the selected runs and what will
    happen to them (GET), done on POST. Active runs cannot be deleted: the page says which."""
    data = request.POST if request.method == "POST" else request.GET
    action = data.get("action", "")
    if action not in ACTIONS:
        return _bad(request, f"'action' must be one of {', '.join(ACTIONS)}, not {action!r}.")
    raw = data.getlist("runs")
    try:
        ids = list(dict.fromkeys(int(i) for i in raw))
    except ValueError:
        return _bad(request, "'runs' must be run ids.")
    if not ids:
        return _bad(request, "Select at least one run (tick its box in the runs table).")
    if len(ids) > MAX_SELECTED:
        return _bad(request, f"Select at most {MAX_SELECTED} runs at once.")
    chosen = list(run_list_for_user(request.user).filter(pk__in=ids).order_by("-created_at", "-id"))
    if len(chosen) != len(ids):
        raise Http404("No such run.")  # a stranger's run is as absent as a missing one
    runs_change_check(request.user, chosen)  # a viewer, or a member and another's run: 403, nothing done
    if request.method == "POST":
        return _do_action(request, action, chosen)
    return _confirm_page(request, action, chosen)


def _do_action(request, action: str, chosen: list[Run]):
    back = _next_url(request, reverse("runs:list"))
    if action == "delete":
        try:
            deleted = runs_delete(chosen)
        except RunsActive as exc:
            return _confirm_page(request, action, chosen, error=str(exc), status=409)
        messages.success(request, f"Deleted {deleted} run{'s' if deleted != 1 else ''}.")
        if urlsplit(back).path.startswith(tuple(reverse("runs:detail", args=[r.pk]) for r in chosen)):
            back = reverse("runs:list")  # the page it came from is gone
        return redirect(back)
    changed = runs_set_archived(chosen, action == "archive")
    messages.success(request, f"{ACTIONS[action][0]}d {changed} run{'s' if changed != 1 else ''}.")
    return redirect(back)


def _confirm_page(request, action: str, chosen: list[Run], *, error: str = "", status: int = 200):
    active = [r for r in chosen if r.is_active] if action == "delete" else []
    title, explanation = ACTIONS[action]
    return render(request, "runs/confirm_action.html", {
        "action": action, "title": title, "explanation": explanation, "chosen": chosen, "active": active,
        "error": error, "next": _next_url(request, _referer(request) or reverse("runs:list")),
    }, status=status)


def _referer(request) -> str:
    """The page that linked to the confirmation page (the table with its filters), if on this site."""
    referer = request.META.get("HTTP_REFERER", "")
    if referer and url_has_allowed_host_and_scheme(referer, allowed_hosts={request.get_host()},
                                                   require_https=request.is_secure()):
        return referer
    return ""


def _bad(request, message: str):
    return render(request, "runs/bad_request.html", {"message": message}, status=400)
