"""The part-ways page: `/runs/examples/partways?a=<id>[,<id>...]&b=<id>[,<id>...]` (issue 57, item 2),
the examples two runs or seed groups of one task did most differently on, each opening the example
across the runs (`runs:examples_across`). What is counted: webapp/runs/examples/partways.py."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.views import redirect_to_login
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from webapp.runs.access import link_readable, runs_readable
from webapp.runs.examples import partways as pw
from webapp.runs.examples.common import ExamplesRefused, parse_solved
from webapp.runs.params import BadParam, int_param

ACROSS_COLUMNS = 8  # the across-runs page's most columns (webapp/runs/examples/across.py MAX_COLUMNS)


def read_sides(readable, a_ids: list[int], b_ids: list[int]):
    """(side A's runs, side B's) in the order asked, among `readable` (one query); Http404 when one is
    not there: a stranger's run is as absent as a missing one."""
    by_id = {r.pk: r for r in readable.filter(pk__in=[*a_ids, *b_ids])}
    missing = [pk for pk in [*a_ids, *b_ids] if pk not in by_id]
    if missing:
        raise Http404(f"No run {missing[0]}.")
    return [by_id[pk] for pk in a_ids], [by_id[pk] for pk in b_ids]


def across_runs(a, b) -> list[int]:
    """The runs an example opens across: every run of both sides, or the first half of the columns from
    each side when they are more than the across page shows."""
    if len(a) + len(b) <= ACROSS_COLUMNS:
        return [r.pk for r in [*a, *b]]
    take_a = min(len(a), max(ACROSS_COLUMNS // 2, ACROSS_COLUMNS - len(b)))
    return [r.pk for r in [*a[:take_a], *b[:ACROSS_COLUMNS - take_a]]]


def across_url_maker(a, b, solved: float | None):
    """example id -> the across-runs page of that example in these runs (reverse() once)."""
    base = reverse("runs:examples_across")
    fixed = {"runs": ",".join(str(pk) for pk in across_runs(a, b))}
    if solved is not None:
        fixed["solved"] = repr(solved)

    def url(example_id: str) -> str:
        return f"{base}?{urlencode({**fixed, 'example': example_id})}"

    return url


def _number(value: float | None, places: int) -> str:
    return "—" if value is None else f"{value:.{places}f}"


def display_row(row: pw.Row, url: str) -> dict:
    """A row's cells as the table prints them, formatted here: floatformat on 200 rows of 13 cells costs
    the page more than the table's query."""
    sides = []
    for name, side in row.sides:
        cells = None
        if side is not None:
            steps = f"steps {side.first_step}–{side.last_step}" + (f", {side.runs} runs" if side.runs > 1 else "")
            cells = {"early": side.early, "late": side.late, "share": f"{side.early:.2f} → {side.late:.2f}",
                     "mean": f"{_number(side.early_mean, 3)} → {_number(side.late_mean, 3)}",
                     "first_right": "never" if side.first_right is None else side.first_right,
                     "visits": side.visits, "steps": steps}
        sides.append((name, cells))
    tone = {"learned_a": "good", "learned_b": "good", "lost_a": "bad", "lost_b": "bad"}.get(row.category, "")
    return {"example_id": row.example_id, "category": row.category, "label": row.category_label, "tone": tone,
            "late_gap": _number(row.late_gap, 2), "sides": sides, "url": url}


@require_GET
@link_readable
def examples_partways(request):
    """`?a=&b=` (run ids, a seed group comma-separated), `&solved=` (the total reward that counts as
    right), `&kind=` (one category), `&limit=` (rows shown, default 200)."""
    raw = {name: request.GET.get(name, "") for name in ("a", "b", "solved", "kind")}
    try:
        a_ids, b_ids = pw.parse_side(raw["a"], "a"), pw.parse_side(raw["b"], "b")
        solved, kind = parse_solved(raw["solved"]), pw.parse_kind(raw["kind"])
        limit = int_param(request, "limit", default=pw.PAGE_ROWS, low=1, high=pw.MAX_PAGE_ROWS)
    except BadParam as exc:
        return render(request, "runs/examples/partways.html", {"raw": raw, "message": str(exc)}, status=400)
    try:
        a, b = read_sides(runs_readable(request), a_ids, b_ids)
    except Http404:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        raise
    context = {"raw": raw, "a": a, "b": b, "kind": kind, "limit": limit,
               "compare_url": reverse("runs:compare") + "?" + urlencode([("runs", r.pk) for r in [*a, *b]])}
    try:
        table = pw.partways(a, b, solved=solved)
    except ExamplesRefused as exc:
        return render(request, "runs/examples/partways.html", {**context, "message": str(exc)}, status=400)
    shown = table.of_category(kind)
    url = across_url_maker(a, b, solved)
    here = {"a": raw["a"], "b": raw["b"], **({"solved": raw["solved"]} if solved is not None else {})}
    return render(request, "runs/examples/partways.html", {
        **context, "table": table, "total": len(shown),
        "rows": [display_row(row, url(row.example_id)) for row in shown[:limit]],
        "more_url": "?" + urlencode({**here, **({"kind": kind} if kind else {}), "limit": min(pw.MAX_PAGE_ROWS, limit * 5)})
        if len(shown) > limit and limit < pw.MAX_PAGE_ROWS else None,
        "categories": [(key, label, table.counts[key], "?" + urlencode({**here, "kind": key}))
                       for key, label in pw.CATEGORIES.items()],
        "all_url": "?" + urlencode(here),
    })
