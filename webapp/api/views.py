"""The API (`/api/...`, JSON): thin DRF views that parse parameters, call a selector and present
rows; the one write is run creation (`POST /api/runs/`, checked as the launch form checks it), and
a finished run's adapter downloads as a zip. Authentication: a personal token (`Authorization: Bearer <key>`) or the
browser session; anonymous requests get 401, a run the user may not see is a 404, and what a token
reaches is its scope (webapp/api/scope.py)."""

from __future__ import annotations

from django.http import FileResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from webapp.api import bodies, params, schema, selectors
from webapp.api.launch_body import launch_body, launch_from_body, refused_response
from webapp.api.scope import api_run, api_runs, token_default_project, token_project_check
from webapp.runs.charts import series
from webapp.runs.export.adapters import adapter_folder, zip_folder
from webapp.runs.inspector import steps as inspect
from webapp.runs.launch.check import LaunchRefused
from webapp.runs.params import int_param, series_keys, step_range
from webapp.runs.services import run_create


@extend_schema(methods=["GET"], operation_id="runs_list", parameters=[*schema.RUN_FILTERS, *schema.PAGE],
               responses=schema.responses(schema.RunPageSerializer, not_found=False))
@extend_schema(methods=["POST"], operation_id="runs_create", request=schema.RunCreateSerializer,
               responses=schema.create_responses(schema.RunSerializer))
@api_view(["GET", "POST"])
def run_list(request):
    """`GET /api/runs/?state=&task=&program=&owner=&q=&config=key=value&limit=&offset=`: the runs you
    may see. `POST /api/runs/` with `{"task", "program", "name", "tags", "notes", "preset", "config"}`:
    queues a run of yours, checked as the launch form checks it (201 with the run; 400 with `errors`,
    field -> messages)."""
    if request.method == "POST":
        return _run_create(request)
    filters = params.run_filters(request)
    offset, limit = params.page_params(request)
    runs = selectors.run_list_api(api_runs(request, ids_first=True), **filters)
    rows = selectors.with_project_name(runs)[offset:offset + limit]  # the count reads no project
    page = [bodies.run_dict(run) for run in rows]
    return Response(params.paginated(request, page, count=runs.count(), offset=offset, limit=limit))


def _run_create(request):
    try:
        asked = launch_body(request.user, request.data)
        project = asked.project or token_default_project(request)
        token_project_check(request, project)
        launch = launch_from_body(request.user, asked, project=project)
    except LaunchRefused as refused:
        return refused_response(refused)
    run = run_create(launch, name=asked.name, tags=asked.tags, notes=asked.notes)
    location = request.build_absolute_uri(reverse("api:run", args=[run.pk]))
    return Response(bodies.run_dict(selectors.run_get_api(api_runs(request), run.pk)), status=201,
                    headers={"Location": location})


@extend_schema(operation_id="run_detail", responses=schema.responses(schema.RunSerializer))
@api_view(["GET"])
def run_detail(request, run_id: int):
    """`GET /api/runs/<id>/`: the run, its full config and its summary."""
    return Response(bodies.run_dict(selectors.run_get_api(api_runs(request), run_id)))


@extend_schema(operation_id="run_metrics", parameters=schema.METRICS,
               responses=schema.responses(schema.MetricsSerializer))
@api_view(["GET"])
def run_metrics(request, run_id: int):
    """`GET /api/runs/<id>/metrics/?series=a,b&max_points=&from_step=&to_step=`: every stored step
    of each series (the newest attempt wins a step), or at most `max_points` per series
    (MinMaxLTTB, as the charts)."""
    run = api_run(request, run_id)
    keys = series_keys(request, max_series=params.MAX_SERIES)
    max_points = int_param(request, "max_points", low=params.MAX_POINTS_LOW, high=params.MAX_POINTS_HIGH,
                           blank_is_absent=False)
    from_step, to_step = step_range(request, blank_is_absent=False)
    found, _ = series.metric_series(run, keys=keys, from_step=from_step, to_step=to_step)
    payload = {key: series.series_payload(s, max_points or max(1, s.steps.size)) for key, s in found.items()}
    return Response({"run": run.pk, "series": payload})


def _step_attempt(request, run, step: int) -> int:
    attempt = int_param(request, "attempt", low=1, blank_is_absent=False)
    attempt, _ = inspect.step_attempt(run, step, attempt)  # 404 when the step is not stored
    return attempt


@extend_schema(operation_id="step_rollouts", parameters=[schema.ATTEMPT, schema.PROMPTS, *schema.PAGE],
               responses=schema.responses(schema.RolloutPageSerializer))
@api_view(["GET"])
def step_rollouts(request, run_id: int, step: int):
    """`GET /api/runs/<id>/steps/<step>/rollouts/?attempt=&prompts=1&limit=&offset=`: the step's
    rollouts with their module calls (prompts only with `prompts=1`)."""
    run = api_run(request, run_id)
    prompts = params.flag(request, "prompts")
    offset, limit = params.page_params(request)
    attempt = _step_attempt(request, run, step)
    rows, count = selectors.step_rollouts(run, attempt, step, offset=offset, limit=limit, prompts=prompts)
    results = [bodies.rollout_dict(r, prompts=prompts) for r in rows]
    return Response(params.paginated(request, results, count=count, offset=offset, limit=limit))


@extend_schema(operation_id="step_groups", parameters=[schema.ATTEMPT, schema.MODULE, *schema.PAGE],
               responses=schema.responses(schema.GroupPageSerializer))
@api_view(["GET"])
def step_groups(request, run_id: int, step: int):
    """`GET /api/runs/<id>/steps/<step>/groups/?attempt=&module=&limit=&offset=`: the step's
    module-level groups with their members."""
    run = api_run(request, run_id)
    module = request.GET.get("module", "").strip()
    if len(module) > 100:
        raise params.BadParam("'module' must be at most 100 characters.")
    offset, limit = params.page_params(request)
    attempt = _step_attempt(request, run, step)
    rows, count = selectors.step_groups(run, attempt, step, offset=offset, limit=limit, module=module)
    results = [bodies.group_dict(g) for g in rows]
    return Response(params.paginated(request, results, count=count, offset=offset, limit=limit))


@extend_schema(operation_id="run_adapter", responses={
    (200, "application/zip"): OpenApiResponse(OpenApiTypes.BINARY, description=(
        "The run's final LoRA adapter as a zip: PEFT format (adapter_config.json, whose base_model_name_or_path "
        "is the run's model id, and adapter_model.safetensors) and a README.md saying how to load it.")),
    **{code: answer for code, answer in schema.responses(None).items() if code != 200}})
@api_view(["GET"])
def run_adapter(request, run_id: int):
    """`GET /api/runs/<id>/adapter/`: the LoRA adapter a succeeded run trained, as a zip (404 while the
    run has none: queued, running, failed or cancelled before its last step)."""
    run = api_run(request, run_id)
    folder = adapter_folder(run)
    if folder is None:
        raise NotFound(f"Run {run.pk} has no trained adapter ({run.state}): a run writes it when it succeeds.")
    return FileResponse(zip_folder(folder), as_attachment=True, filename=f"run-{run.pk}-adapter.zip",
                        content_type="application/zip")


@extend_schema(exclude=True)
@api_view(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
def unknown(request, rest: str):
    """Any other address under `/api/`: a JSON 404 an API client can read (401 when anonymous)."""
    raise NotFound(f"No API endpoint at /api/{rest}. The endpoints are listed at /api/docs/.")
