"""The read API (`/api/...`, GET only, JSON): thin DRF views that parse parameters, call a
selector and present rows. Authentication: a personal token (`Authorization: Bearer <key>`) or the
browser session; anonymous requests get 401, a run the user may not see is a 404."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from webapp.api import params, present, schema, selectors
from webapp.runs import inspect, series
from webapp.runs.params import int_param, series_keys, step_range
from webapp.runs.selectors import run_get_for_user


@extend_schema(operation_id="runs_list", parameters=[*schema.RUN_FILTERS, *schema.PAGE],
               responses=schema.responses(schema.RunPageSerializer, not_found=False))
@api_view(["GET"])
def run_list(request):
    """`GET /api/runs/?state=&task=&program=&owner=&q=&config=key=value&limit=&offset=`."""
    filters = params.run_filters(request)
    offset, limit = params.page_params(request)
    runs = selectors.run_list_api(request.user, **filters)
    page = [present.run_dict(run) for run in runs[offset:offset + limit]]
    return Response(params.paginated(request, page, count=runs.count(), offset=offset, limit=limit))


@extend_schema(operation_id="run_detail", responses=schema.responses(schema.RunSerializer))
@api_view(["GET"])
def run_detail(request, run_id: int):
    """`GET /api/runs/<id>/`: the run, its full config and its summary."""
    return Response(present.run_dict(selectors.run_get_api(request.user, run_id)))


@extend_schema(operation_id="run_metrics", parameters=schema.METRICS,
               responses=schema.responses(schema.MetricsSerializer))
@api_view(["GET"])
def run_metrics(request, run_id: int):
    """`GET /api/runs/<id>/metrics/?series=a,b&max_points=&from_step=&to_step=`: every stored step
    of each series (the newest attempt wins a step), or at most `max_points` per series
    (MinMaxLTTB, as the charts)."""
    run = run_get_for_user(request.user, run_id)
    keys = series_keys(request, max_series=params.MAX_SERIES)
    max_points = int_param(request, "max_points", low=params.MAX_POINTS_LOW, high=params.MAX_POINTS_HIGH)
    from_step, to_step = step_range(request)
    found, _ = series.metric_series(run, keys=keys, from_step=from_step, to_step=to_step)
    payload = {key: series.series_payload(s, max_points or max(1, s.steps.size)) for key, s in found.items()}
    return Response({"run": run.pk, "series": payload})


def _step_attempt(request, run, step: int) -> int:
    attempt = int_param(request, "attempt", low=1)
    attempt, _ = inspect.step_attempt(run, step, attempt)  # 404 when the step is not stored
    return attempt


@extend_schema(operation_id="step_rollouts", parameters=[schema.ATTEMPT, schema.PROMPTS, *schema.PAGE],
               responses=schema.responses(schema.RolloutPageSerializer))
@api_view(["GET"])
def step_rollouts(request, run_id: int, step: int):
    """`GET /api/runs/<id>/steps/<step>/rollouts/?attempt=&prompts=1&limit=&offset=`: the step's
    rollouts with their module calls (prompts only with `prompts=1`)."""
    run = run_get_for_user(request.user, run_id)
    prompts = params.flag(request, "prompts")
    offset, limit = params.page_params(request)
    attempt = _step_attempt(request, run, step)
    rows, count = selectors.step_rollouts(run, attempt, step, offset=offset, limit=limit, prompts=prompts)
    results = [present.rollout_dict(r, prompts=prompts) for r in rows]
    return Response(params.paginated(request, results, count=count, offset=offset, limit=limit))


@extend_schema(operation_id="step_groups", parameters=[schema.ATTEMPT, schema.MODULE, *schema.PAGE],
               responses=schema.responses(schema.GroupPageSerializer))
@api_view(["GET"])
def step_groups(request, run_id: int, step: int):
    """`GET /api/runs/<id>/steps/<step>/groups/?attempt=&module=&limit=&offset=`: the step's
    module-level groups with their members."""
    run = run_get_for_user(request.user, run_id)
    module = request.GET.get("module", "").strip()
    if len(module) > 100:
        raise params.BadParam("'module' must be at most 100 characters.")
    offset, limit = params.page_params(request)
    attempt = _step_attempt(request, run, step)
    rows, count = selectors.step_groups(run, attempt, step, offset=offset, limit=limit, module=module)
    results = [present.group_dict(g) for g in rows]
    return Response(params.paginated(request, results, count=count, offset=offset, limit=limit))


@extend_schema(exclude=True)
@api_view(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
def unknown(request, rest: str):
    """Any other address under `/api/`: a JSON 404 an API client can read (401 when anonymous)."""
    raise NotFound(f"No API endpoint at /api/{rest}. The endpoints are listed at /api/docs/.")
