"""Run pages and endpoints: parse input, call a selector or service, render."""

from django.contrib import messages
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.fast_json import numbers_response
from webapp.projects.selectors import launchable_projects, personal_project
from webapp.runs.access import (
    anonymized,
    link_readable,
    run_change_check,
    run_read,
)
from webapp.runs.charts import blocks as series_store
from webapp.runs.charts import series
from webapp.runs.charts.timeline import run_timeline
from webapp.runs.credit import report as credit
from webapp.runs.credit.views import change_steps
from webapp.runs.hooks import launch_action_chosen, launch_actions_offered, run_page_extras
from webapp.runs.ingest.retention import rollouts_dropped
from webapp.runs.ingest.texts import fill_call_texts
from webapp.runs.inspector import divergence, groups
from webapp.runs.inspector import grid_cells as present
from webapp.runs.inspector import steps as inspect
from webapp.runs.inspector import token_cells as token_present
from webapp.runs.launch.config_link import config_link_values
from webapp.runs.launch.defaults import config_defaults, model_suggestion_choices, preset_choices
from webapp.runs.launch.forms import RunLaunchForm
from webapp.runs.models import InvalidTransition, ModuleCall, Task
from webapp.runs.params import BadParam, series_keys, step_range
from webapp.runs.params import int_param as _int_param
from webapp.runs.replay.selectors import inspector_replays
from webapp.runs.selectors import launchable_tasks, run_move_targets, step_metrics_after
from webapp.runs.services import run_cancel, run_create, run_resume

METRICS_PAGE_LIMIT = 5000
MAX_POINTS_DEFAULT = 2000  # about two points per horizontal pixel of a wide chart
MAX_POINTS_LIMIT = 20000
MAX_SERIES = 64
HEATMAP_COLUMNS_DEFAULT = 400
EXAMPLES_PAGE = 200
GROUPS_PAGE = 200


def _bad(request, message: str, *, json_response: bool = False):
    if json_response:
        return JsonResponse({"error": message}, status=400)
    return render(request, "runs/bad_request.html", {"message": message}, status=400)


@require_http_methods(["GET", "POST"])
def run_new(request):
    """The launch form; nothing is queued unless RunConfig accepts every value."""
    if request.method == "POST":
        # A staff launch over the launch limits comes back asking "Launch anyway" (RunLaunchForm).
        form = RunLaunchForm(request.POST, user=request.user, ask_over_limits=True)
        action = launch_action_chosen(request.POST) if form.is_valid() else None
        if action is not None:  # another button of the form, e.g. "Launch experiment" (webapp/experiments)
            return action.launch(request, form) or _render_launch(request, form, status=400)
        if form.is_valid():
            cleaned = form.cleaned_data
            run = run_create(cleaned["launch"], name=cleaned["name"], tags=cleaned["tags"], notes=cleaned["notes"])
            messages.success(request, f"Run {run.pk} is queued.", extra_tags="run-queued")
            return redirect("runs:detail", run_id=run.pk)
        return _render_launch(request, form, status=400)
    task = _task_from_query(request)
    if task is None:
        return _render_launch(request, None, status=200)
    preset = request.GET.get("preset") or None
    model = request.GET.get("model") or None
    try:
        initial = config_defaults(task, preset=preset, model=model)
        # A link that carries settings (a sweep's "Launch this", webapp/runs/launch/config_link.py) fills them in.
        initial.update(config_link_values(request.GET["config"]) if request.GET.get("config") else {})
    except ValueError as exc:  # ConfigLinkError (a damaged or foreign link) is a ValueError
        messages.error(request, str(exc))
        return redirect(f"{reverse('runs:new')}?task={task.pk}")
    initial.update(task=task, program=task.program.name, project=_launch_project(request))
    return _render_launch(request, RunLaunchForm(initial=initial, user=request.user), preset=preset, model=model)


def _launch_project(request):
    """The project the form starts on: `?project=NAME` where the user may launch, else their personal one."""
    wanted = request.GET.get("project", "")
    project = launchable_projects(request.user).filter(name__iexact=wanted).first() if wanted else None
    return project or personal_project(request.user)


def _task_from_query(request) -> Task | None:
    tasks = launchable_tasks().select_related("program")
    raw = request.GET.get("task")
    if raw and raw.isdigit():
        task = tasks.filter(pk=int(raw)).first()
        if task:
            return task
    return tasks.filter(name="toy").first() or tasks.first()


def _render_launch(request, form, *, status: int = 200, preset: str | None = None, model: str | None = None):
    task = form["task"].value() if form is not None else None
    task_pk = str(getattr(task, "pk", task) or "")
    task_obj = Task.objects.select_related("program").filter(pk=int(task_pk)).first() if task_pk.isdigit() else None
    actions = launch_actions_offered(task_obj)
    return render(request, "runs/new.html", {
        "form": form, "presets": preset_choices(), "preset": preset, "task_id": task, "suggested_model": model,
        "model_suggestions": model_suggestion_choices(task_obj) if task_obj else [],
        "launch_actions": actions,
        # The button a refused form was sent with: its "Launch anyway" presses it again (_error_summary.html).
        "launch_action_pressed": next((button for button in actions if request.POST.get(button)), None),
    }, status=status)


@require_GET
@link_readable
def run_detail(request, run_id: int):
    run = run_read(request, run_id)
    return render(request, "runs/detail.html", _detail_context(run, request.user))


# The run page's chart sections, in page order: (key, title, what it answers). Which chart goes in
# which is run-charts.js's FAMILIES; a metric no family claims lands in "other".
CHART_SECTIONS = (
    ("learning", "Learning", "Is the run learning? Reward, its components, evaluation, parsed outputs."),
    ("tokens", "Tokens", "Entropy, the sampled tokens' probability, sampler/trainer mismatch per token."),
    ("groups", "Groups", "Do the groups carry a signal? Variance, zero-variance share, similarity, advantages."),
    ("optimization", "Optimization", "Loss, KL, clipping, gradient norm, learning rate, sampler mismatch."),
    ("sampling", "Sampling", "Tokens, truncation, failures, throughput and step time."),
    ("pipeline", "Pipeline", "Do sampling and training overlap? Each side's wait, staleness, the queue, the adapter hand-over."),
    ("other", "Other metrics", "Metrics the program reports itself."),
    ("system", "System", "GPU memory, utilisation and power, process memory, time per process."),
)


def _detail_context(run, user) -> dict:
    live = {
        "run": run.pk, "state": run.state, "attempt": run.attempt,
        "metrics_url": reverse("runs:metrics", args=[run.pk]), "socket_path": f"/ws/runs/{run.pk}/",
        "heatmap_url": reverse("runs:heatmap", args=[run.pk]),
        "timeline_url": reverse("runs:timeline", args=[run.pk]),
        # The step page of step N is this with 0 replaced by N (clicking a chart point opens it).
        "step_url": reverse("runs:step", args=[run.pk, 0]),
        "max_points": MAX_POINTS_DEFAULT,
    }
    # A run trained elsewhere stores its client's config as sent: a key of that name means nothing here.
    optimizes = not run.is_external and (run.config or {}).get("prompt_optimizer", "none") not in ("none", None)
    # Phase 1's record (webapp/runs/ingest/prompt_phase.py) for a run that optimizes prompts first, else None.
    prompt_phase = {"optimizer": run.config.get("prompt_optimizer"), **(run.prompt_optimization or {})} if optimizes else None
    return {"run": run, "live": live, "prompt_phase": prompt_phase, "chart_sections": CHART_SECTIONS,
            "credit_section": credit.program_is_multi_module(run),  # loaded from runs:credit
            "move_choices": list(run_move_targets(user, run)) if run.access.can_change else [],
            **(run_page_extras([run]) if run.access.signed_in_reader else {})}  # e.g. its experiments


@require_POST
def run_cancel_view(request, run_id: int):
    return _transition(request, run_id, run_cancel, "Cancel requested: the run stops at its next step boundary.")


@require_POST
def run_resume_view(request, run_id: int):
    return _transition(request, run_id, run_resume, "Resumed: a new attempt is queued from the newest checkpoint.")


def _transition(request, run_id, service, done_message: str):
    run = run_read(request, run_id)
    run_change_check(request.user, run)
    try:
        service(run)
    except InvalidTransition as exc:
        messages.error(request, f"Not possible now: {exc}")
        return render(request, "runs/detail.html", _detail_context(run, request.user), status=409)
    messages.success(request, done_message)
    return redirect("runs:detail", run_id=run.pk)


SERIES_PARAMS = ("series", "max_points", "from_step", "to_step")


@require_GET
@link_readable
def run_metrics(request, run_id: int):
    """`GET /runs/<id>/metrics.json?after=<seq>`: the stored step metrics after a seq.

    With any of `series=a,b`, `max_points=`, `from_step=`, `to_step=` it answers per series instead
    (see `_metric_series`): the long-run overview and the zoom re-query of the live page.
    """
    run = run_read(request, run_id)
    if any(name in request.GET for name in SERIES_PARAMS):
        if "after" in request.GET:
            return _bad(request, "'after' pages the raw points; it cannot be combined with series parameters.",
                        json_response=True)
        return _metric_series(request, run)
    raw_after = request.GET.get("after", "0")
    try:
        after = int(raw_after)
        if after < 0:
            raise ValueError
    except ValueError:
        return JsonResponse({"error": f"'after' must be a non-negative integer, not {raw_after!r}."}, status=400)
    points = step_metrics_after(run, after_seq=after, limit=METRICS_PAGE_LIMIT)
    return numbers_response(
        {
            "run": run.pk,
            "state": run.state,
            "current_step": run.current_step,
            "best_reward": run.best_reward,
            "last_seq": points[-1]["seq"] if points else after,
            "complete": len(points) < METRICS_PAGE_LIMIT,
            "points": points,
            # Wall time and tokens seen of these points' steps (the charts' other x axes).
            "axes": series.step_axes(run, (p["step"] for p in points)),
        }
    )


def _metric_series(request, run):
    """Per-series traces in a step range, each at most `max_points` long (MinMaxLTTB downsampling
    keeps spikes and the first and last points); `last_seq` is the newest row read, so the live page
    continues from it with `?after=`."""
    try:
        max_points = _int_param(request, "max_points", default=MAX_POINTS_DEFAULT, low=10, high=MAX_POINTS_LIMIT)
        from_step, to_step = step_range(request)
        keys = series_keys(request, max_series=MAX_SERIES)
    except BadParam as exc:
        return _bad(request, str(exc), json_response=True)
    table = series_store.read_table(run.pk, from_step=from_step, to_step=to_step)
    found, last_seq = series.table_series(table, keys)
    payloads = {key: series.series_payload(s, max_points) for key, s in found.items()}
    return numbers_response({
        "run": run.pk, "state": run.state, "current_step": run.current_step, "attempt": run.attempt,
        "best_reward": run.best_reward,
        "last_seq": last_seq, "complete": True, "points": [],
        "from_step": from_step, "to_step": to_step, "max_points": max_points,
        "series": payloads,
        # One step -> (wall time, tokens seen) table for every step drawn, shared by all series.
        "axes": series.step_axes(run, {x for p in payloads.values() for x in p["x"]},
                                 table=table if from_step is None else None),
    })


@require_GET
@link_readable
def run_heatmap(request, run_id: int):
    """`GET /runs/<id>/heatmap.json?family=group_var|zero_var_share&max_columns=`: modules x steps."""
    run = run_read(request, run_id)
    family = request.GET.get("family", "group_var")
    if family not in series.HEATMAP_FAMILIES:
        return _bad(request, f"'family' must be one of {sorted(series.HEATMAP_FAMILIES)}, not {family!r}.",
                    json_response=True)
    try:
        columns = _int_param(request, "max_columns", default=HEATMAP_COLUMNS_DEFAULT, low=2, high=5000)
    except BadParam as exc:
        return _bad(request, str(exc), json_response=True)
    return numbers_response(series.metric_heatmap(run, family, max_columns=columns))


@require_GET
@link_readable
def run_timeline_data(request, run_id: int):
    """`GET /runs/<id>/timeline.json?from_step=&to_step=`: the timeline's bars of a window of steps
    (none given: the newest), thinned to evenly spaced steps past a page's worth."""
    run = run_read(request, run_id)
    try:
        from_step, to_step = step_range(request)
    except BadParam as exc:
        return _bad(request, str(exc), json_response=True)
    return numbers_response(run_timeline(run, from_step=from_step, to_step=to_step))


@require_GET
@link_readable
def run_step(request, run_id: int, step: int):
    """One step: its metrics, its examples (links to the trajectory inspector) and its groups."""
    run = run_read(request, run_id)
    try:
        attempt = _int_param(request, "attempt", low=1)
        offset = _int_param(request, "offset", default=0)
        from_step, _ = change_steps(request)
    except BadParam as exc:
        return _bad(request, str(exc))
    attempt, metrics = inspect.step_attempt(run, step, attempt)
    try:
        credit_report = credit.step_section(run, step, attempt, from_step=from_step)  # None: one module
    except BadParam as exc:
        return _bad(request, str(exc))
    module = request.GET.get("module", "")[:100]
    examples, n_examples = inspect.step_examples(run, attempt, step, offset=offset, limit=EXAMPLES_PAGE)
    group_rows, n_groups = inspect.step_groups(run, attempt, step, module=module, limit=GROUPS_PAGE)
    return render(request, "runs/step.html", {
        "run": run, "step": step, "attempt": attempt, "metrics": sorted(metrics.items()),
        "examples": examples, "n_examples": n_examples, "offset": offset, "page": EXAMPLES_PAGE,
        "next_offset": offset + EXAMPLES_PAGE if offset + EXAMPLES_PAGE < n_examples else None,
        "modules": inspect.step_module_summary(run, attempt, step), "groups": group_rows, "n_groups": n_groups,
        "module": module, "dropped": "" if examples else rollouts_dropped(run, step),
        "forks": token_present.fork_rows(run, attempt, step), "no_forks": token_present.no_forks_note(run),
        "credit": credit_report,
    })


@require_GET
@link_readable
def run_trajectories(request, run_id: int, step: int):
    """The trajectory inspector: `?example=<id>` of a step, rollouts side by side, calls aligned; with
    `?colour=` its tokens coloured, with `&rollout=<index>&call=<position>&token=<i>` opened at one token."""
    run = run_read(request, run_id)
    example_id = request.GET.get("example", "")
    try:
        if not example_id:
            raise BadParam("'example' is required: the example id whose rollouts to show.")
        attempt = _int_param(request, "attempt", low=1)
        focus = token_present.focus_param(request)
    except BadParam as exc:
        return _bad(request, str(exc))
    dropped = rollouts_dropped(run, step)
    if dropped:  # 410: the text existed and was removed on purpose; the message says by which setting
        return render(request, "runs/dropped.html", {"run": run, "step": step, "message": dropped}, status=410)
    grid = inspect.trajectory_grid(run, step, example_id, attempt=attempt)
    if run.access.anonymous:
        grid = inspect.grid_hide(grid, lambda text: anonymized(text, run))
    parting = divergence.grid_divergence(grid)  # where the best and the worst rollout part
    tokens = token_present.inspector_tokens(run, grid, parting, colour=request.GET.get("colour"), focus=focus)
    return render(request, "runs/trajectories.html", {
        "run": run, "grid": grid, "rows": present.grid_rows_html(grid, run.pk, parting, tokens.cells),
        "divergence": parting, "tokens": tokens,
        "history_url": present.example_history_url(run.pk, example_id),
        "columns": list(zip([inspect.slot_label(s) for s in grid.slots], grid.distinct, strict=True)),
        # GRPO and MMGRPO sample their G rollouts with fork_on_first too, so they have parent links;
        # only MHGPO's forks are a fork tree worth showing.
        "show_fork_trees": bool(grid.trees) and (run.config or {}).get("strategy") == "mhgpo",
        "replays": inspector_replays(run, grid.attempt, grid.step, grid.example_id),  # Replay this module
    })


@require_GET
@link_readable
def run_group(request, run_id: int, group_id: int):
    """The group inspector: members, reward components, used / GRPO / GDPO advantages side by side."""
    run = run_read(request, run_id)
    view = groups.group_detail(run, group_id)
    chart = {
        "labels": [f"#{m.member.position} r{m.member.call.rollout.index}" for m in view.members],
        "used": [m.used for m in view.members], "grpo": [m.grpo for m in view.members],
        "gdpo": [m.gdpo for m in view.members],
    }
    return render(request, "runs/group.html", {"run": run, "view": view, "group": view.group, "chart": chart,
                                               "has_forks": (run.config or {}).get("strategy") == "mhgpo"})


@require_GET
@link_readable
def run_call_prompt(request, run_id: int, call_id: int):
    """A module call's prompt, as plain text (the inspector loads prompts on demand)."""
    run = run_read(request, run_id)
    call = ModuleCall.objects.filter(pk=call_id, rollout__run=run).defer("messages").first()
    if call is not None:
        fill_call_texts([call])
    prompt = call.prompt if call is not None else None
    if prompt is None:
        raise Http404("No such call in this run.")
    return HttpResponse(prompt, content_type="text/plain; charset=utf-8")
