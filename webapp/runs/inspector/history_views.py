"""The per-example history page: one training example's rollouts across every step that drew it."""

from urllib.parse import urlencode

from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from webapp.runs.access import link_readable, run_read
from webapp.runs.inspector import history
from webapp.runs.inspector.grid_cells import example_history_url
from webapp.runs.params import BadParam, int_param

EXAMPLE_ID_MAX = 200  # Rollout.example_id's max_length: a longer id cannot be stored


@require_GET
@link_readable
def example_history(request, run_id: int, example_id: str | None = None):
    """`/runs/<id>/examples/<example_id>/` (or `/runs/<id>/examples/?example=`), `?before=<step>`
    for older visits: a chart of the reward spread and group statistics per visit, and the table."""
    run = run_read(request, run_id)
    if example_id is None:
        example_id = request.GET.get("example")
    try:
        if example_id is None:
            raise BadParam("'example' is required: the example id whose history to show.")
        if len(example_id) > EXAMPLE_ID_MAX:
            raise BadParam(f"An example id has at most {EXAMPLE_ID_MAX} characters.")
        before = int_param(request, "before", low=1)
    except BadParam as exc:
        return render(request, "runs/bad_request.html", {"message": str(exc)}, status=400)
    found = history.example_history(run, example_id, before=before, limit=history.VISITS_CAP)
    # reverse() once, then fill in the step: a page may list hundreds of visits.
    base = reverse("runs:trajectories", args=[run.pk, 987654321])

    def inspect_url(visit: history.Visit) -> str:
        query = urlencode({"example": example_id, "attempt": visit.attempt})
        return base.replace("987654321", str(visit.step)) + "?" + query

    here = example_history_url(run.pk, example_id)
    older = None
    if found.older_before is not None:
        older = here + ("&" if "?" in here else "?") + urlencode({"before": found.older_before})
    return render(request, "runs/example_history.html", {
        "run": run, "history": found, "rows": [(v, inspect_url(v), stats) for v, stats in history.module_cells(found)],
        "chart": history.chart_payload(found, inspect_url), "older_url": older, "newest_url": here,
    })
