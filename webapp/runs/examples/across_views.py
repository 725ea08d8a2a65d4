"""The across-runs page (issue 57, item 1): `/runs/examples/across?runs=5,7&example=claim-0`, one
example's answers in several runs of one task (or one run in several step windows) side by side."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.views import redirect_to_login
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from webapp.runs.access import link_readable, runs_readable
from webapp.runs.examples import across
from webapp.runs.examples.across_html import rows_html
from webapp.runs.examples.common import ExamplesRefused, parse_solved
from webapp.runs.inspector.grid_cells import example_history_url
from webapp.runs.params import BadParam


def _bad(request, message: str):
    return render(request, "runs/bad_request.html", {"message": message}, status=400)


def across_url(windows, example_id: str, align: str, solved: float | None) -> str:
    query = {"runs": ",".join(str(w) for w in windows), "example": example_id}
    if align != "step":
        query["align"] = align
    if solved is not None:
        query["solved"] = f"{solved:g}"
    return reverse("runs:examples_across") + "?" + urlencode(query)


@require_GET
@link_readable
def examples_across(request):
    """`?runs=<id>[:<from>-<to>],...` (2 to 8 columns), `example=<id>`, `align=step|fraction`,
    `solved=<total reward>`. Reads the runs as the compare page does: those the user's projects and
    the browser's share links open; any other is the 404 of a run that does not exist."""
    try:
        windows = across.parse_columns(request.GET.getlist("runs"))
        example_id = across.parse_example(request.GET.get("example"))
        align = across.parse_align(request.GET.get("align"))
        solved = parse_solved(request.GET.get("solved"))
    except BadParam as exc:
        return _bad(request, str(exc))
    ids = list(dict.fromkeys(w.run_id for w in windows))
    by_id = {r.pk: r for r in runs_readable(request).filter(pk__in=ids)}
    if len(by_id) != len(ids):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())  # as for any run no link of it opens
        raise Http404("No such run.")  # a stranger's run is as absent as a missing one
    try:
        found = across.example_across([by_id[w.run_id] for w in windows], windows, example_id, align=align,
                                      solved=solved, limit=across.VISITS_CAP)
    except ExamplesRefused as exc:
        return _bad(request, str(exc))
    for column in found.columns:
        column.history_url = example_history_url(column.run.pk, example_id)
        # reverse() once per column, then fill in the step: a column may hold hundreds of visits.
        base = reverse("runs:trajectories", args=[column.run.pk, 987654321])
        for cell in column.cells:
            cell.url = (base.replace("987654321", str(cell.step)) + "?"
                        + urlencode({"example": example_id, "attempt": cell.attempt}))
    older = across_url(found.older_columns(), example_id, align, solved) if found.capped else None
    return render(request, "runs/examples/across.html", {
        "across": found, "older_url": older, "rows_html": rows_html(found),
        "align_urls": {a: across_url(windows, example_id, a, solved) for a in across.ALIGNS},
        "runs_param": ",".join(str(w) for w in windows), "cap": across.VISITS_CAP,
    })
