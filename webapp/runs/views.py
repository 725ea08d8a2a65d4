"""Run pages and endpoints: parse input, call a selector or service, render."""

from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.runs.selectors import run_get_for_user, run_list_for_user, step_metrics_after

METRICS_PAGE_LIMIT = 5000


@require_GET
def run_list(request):
    runs = run_list_for_user(request.user)[:200]
    return render(request, "runs/list.html", {"runs": runs})


@require_GET
def run_detail(request, run_id: int):
    run = run_get_for_user(request.user, run_id)
    return render(request, "runs/detail.html", {"run": run})


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
            "last_seq": points[-1]["seq"] if points else after,
            "complete": len(points) < METRICS_PAGE_LIMIT,
            "points": points,
        }
    )
