"""Run pages and endpoints: parse input, call a selector or service, render."""

from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.runs.forms import RunFilterForm, RunLaunchForm
from webapp.runs.launch import config_defaults, preset_choices
from webapp.runs.models import InvalidTransition, Task
from webapp.runs.selectors import run_get_for_user, run_list_filtered, step_metrics_after
from webapp.runs.services import run_cancel, run_create, run_resume

METRICS_PAGE_LIMIT = 5000
RUNS_PAGE_LIMIT = 200


@require_GET
def run_list(request):
    filters = RunFilterForm(request.GET)
    if not filters.is_valid():
        return render(request, "runs/list.html", {"filters": filters, "runs": []}, status=400)
    runs = run_list_filtered(request.user, **filters.cleaned_data)[:RUNS_PAGE_LIMIT]
    return render(request, "runs/list.html", {"filters": filters, "runs": runs})


@require_http_methods(["GET", "POST"])
def run_new(request):
    """The launch form; nothing is queued unless RunConfig accepts every value."""
    if request.method == "POST":
        form = RunLaunchForm(request.POST)
        if form.is_valid():
            run = run_create(owner=request.user, task=form.cleaned_data["task"], config=form.cleaned_data["config"],
                             name=form.cleaned_data["name"])
            messages.success(request, f"Run {run.pk} is queued.")
            return redirect("runs:detail", run_id=run.pk)
        return _render_launch(request, form, status=400)
    task = _task_from_query(request)
    if task is None:
        return _render_launch(request, None, status=200)
    preset = request.GET.get("preset") or None
    try:
        initial = config_defaults(task, preset=preset)
    except ValueError as exc:
        messages.error(request, str(exc))
        return redirect(f"{reverse('runs:new')}?task={task.pk}")
    initial.update(task=task, program=task.program.name)
    return _render_launch(request, RunLaunchForm(initial=initial), preset=preset)


def _task_from_query(request) -> Task | None:
    tasks = Task.objects.select_related("program")
    raw = request.GET.get("task")
    if raw and raw.isdigit():
        task = tasks.filter(pk=int(raw)).first()
        if task:
            return task
    return tasks.filter(name="toy").first() or tasks.first()


def _render_launch(request, form, *, status: int = 200, preset: str | None = None):
    task = form["task"].value() if form is not None else None
    return render(request, "runs/new.html", {
        "form": form, "presets": preset_choices(), "preset": preset, "task_id": task,
    }, status=status)


@require_GET
def run_detail(request, run_id: int):
    run = run_get_for_user(request.user, run_id)
    return render(request, "runs/detail.html", _detail_context(run))


def _detail_context(run) -> dict:
    live = {
        "run": run.pk, "state": run.state, "attempt": run.attempt,
        "metrics_url": reverse("runs:metrics", args=[run.pk]), "socket_path": f"/ws/runs/{run.pk}/",
    }
    return {"run": run, "live": live}


@require_POST
def run_cancel_view(request, run_id: int):
    return _transition(request, run_id, run_cancel, "Cancel requested: the run stops at its next step boundary.")


@require_POST
def run_resume_view(request, run_id: int):
    return _transition(request, run_id, run_resume, "Resumed: a new attempt is queued from the newest checkpoint.")


def _transition(request, run_id, service, done_message: str):
    run = run_get_for_user(request.user, run_id)
    try:
        service(run)
    except InvalidTransition as exc:
        messages.error(request, f"Not possible now: {exc}")
        return render(request, "runs/detail.html", _detail_context(run), status=409)
    messages.success(request, done_message)
    return redirect("runs:detail", run_id=run.pk)


@require_GET
def run_metrics(request, run_id: int):
    """`GET /runs/<id>/metrics.json?after=<seq>`: the stored step metrics after a seq."""
    run = run_get_for_user(request.user, run_id)
    raw_after = request.GET.get("after", "0")
    try:
        after = int(raw_after)
        if after < 0:
            raise ValueError
    except ValueError:
        return JsonResponse({"error": f"'after' must be a non-negative integer, not {raw_after!r}."}, status=400)
    points = step_metrics_after(run, after_seq=after, limit=METRICS_PAGE_LIMIT)
    return JsonResponse(
        {
            "run": run.pk,
            "state": run.state,
            "current_step": run.current_step,
            "last_seq": points[-1]["seq"] if points else after,
            "complete": len(points) < METRICS_PAGE_LIMIT,
            "points": points,
        }
    )
