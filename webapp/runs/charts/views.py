"""The compare page: chosen runs' metrics overlaid, runs that differ only in their seed drawn as one
mean curve with a band (webapp/runs/charts/compare_groups.py, compare_series.py), and the settings in which
they differ. Runs come from `runs=` ids and from registered sources (`experiment=3`,
webapp/runs/charts/sources.py)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.views import redirect_to_login
from django.db.models import Case, IntegerField, When, prefetch_related_objects
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from webapp.runs.access import link_grant, link_readable, runs_readable, scrub_text
from webapp.runs.charts.aggregates import BAND_KINDS
from webapp.runs.charts.compare import compare_page
from webapp.runs.charts.compare_groups import BadGrouping
from webapp.runs.charts.sources import run_source, run_source_names
from webapp.runs.hooks import run_page_extras
from webapp.runs.params import BadParam
from webapp.runs.selectors import run_list_for_user

RUNS_PAGE_LIMIT = 200  # runs offered as checkboxes
MAX_POINTS = 2000  # per trace, as the run page (views.MAX_POINTS_DEFAULT)
COMPARE_MAX_RUNS = 20  # chosen one by one (`runs=`): an experiment's runs, 2 x up to 10 seeds
COMPARE_SOURCE_MAX_RUNS = 1000  # brought by sources (`experiment=3`): a sweep's runs
COMPARE_MAX_METRICS = 12
DIFFERENCES_WIDE = 6  # more columns than this: the differences table has a row per group (or run) instead
BANDS = (*BAND_KINDS, "none")
BAND_LABELS = {"ci": "95% bootstrap CI of the mean", "minmax": "min to max", "std": "mean ± std",
               "none": "none: every run on its own"}


def _bad(request, message: str):
    return render(request, "runs/bad_request.html", {"message": message}, status=400)


def _explicit_ids(request) -> list[int]:
    try:
        ids = list(dict.fromkeys(int(i) for i in request.GET.getlist("runs")))
    except ValueError:
        raise BadParam("'runs' must be run ids.") from None
    if len(ids) > COMPARE_MAX_RUNS:
        raise BadParam(f"Compare at most {COMPARE_MAX_RUNS} runs at once.")
    return ids


def _band(request) -> str:
    band = request.GET.get("band") or "ci"
    if band not in BANDS:
        raise BadParam(f"'band' must be one of {', '.join(BANDS)}, not {band!r}.")
    return band


def _source_runs(request) -> tuple[list, list[tuple[str, str]]]:
    """The runs the request's sources bring (Http404 from a resolver propagates), and the sources."""
    runs, sources = [], []
    for name in run_source_names():
        for value in dict.fromkeys(v for v in request.GET.getlist(name) if v):
            try:
                runs.extend(run_source(name)(request.user, value))
            except ValueError as exc:
                raise BadParam(f"'{name}': {exc}") from None
            sources.append((name, value))
    if len(runs) > COMPARE_SOURCE_MAX_RUNS:
        raise BadParam(f"Those sources bring {len(runs)} runs; compare at most {COMPARE_SOURCE_MAX_RUNS} at once.")
    return runs, sources


def _readable_from_sources(visible, runs: list, skip: set[int]) -> list:
    """The sources' runs, once each, that the request may read: a resolver answers for its user, and
    the page checks that once more by id (one small query; the runs are not fetched twice)."""
    runs = list({r.pk: r for r in runs if r.pk not in skip}.values())
    if not runs:
        return []
    readable = set(visible.filter(pk__in=[r.pk for r in runs]).values_list("pk", flat=True))
    runs = [r for r in runs if r.pk in readable]
    prefetch_related_objects(runs, "task__program")  # config_differences names them (no query if fetched)
    return runs


def _choices(visible, chosen: list) -> list:
    """The runs offered as checkboxes, with only what the list shows (no configs to decode): the
    compared ones first (a sweep's runs are rarely the newest 200), then the newest others."""
    ids = [r.pk for r in chosen]
    first = Case(When(pk__in=ids, then=0), default=1, output_field=IntegerField())
    return list(visible.select_related(None).select_related("task", "project")
                .only("id", "name", "state", "task__name", "project__name")
                .order_by(first, "-created_at", "-id")[:RUNS_PAGE_LIMIT + len(ids)])


ACROSS_COLUMNS = 8  # the across-runs page's most columns (webapp/runs/examples/across.py MAX_COLUMNS)


def _example_links(chosen, parting) -> dict:
    """Where these runs part (the part-ways table of the two sides) and the runs one example opens across,
    for runs of one task (issue 57)."""
    if parting is None:
        return {"parting_url": None, "across_runs": ""}
    a, b = parting
    query = urlencode({"a": ",".join(map(str, a)), "b": ",".join(map(str, b))})
    return {"parting_url": f"{reverse('runs:examples_partways')}?{query}",
            "across_runs": ",".join(str(r.pk) for r in chosen[:ACROSS_COLUMNS])}


@require_GET
@link_readable
def run_compare(request):
    """Overlay chosen metrics of several runs (`?runs=1&runs=2&metrics=reward/mean`, or a source's runs:
    `?experiment=3`), groups of seeds as bands (`band=ci|minmax|std|none`, `group_by=<setting>`), with
    the settings in which they differ. Runs of several projects side by side when the user reads them
    all; a compare link's holder chooses among the link's runs."""
    visible = runs_readable(request)
    try:
        ids, band = _explicit_ids(request), _band(request)
        try:
            from_sources, sources = _source_runs(request)
        except Http404:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            raise
    except BadParam as exc:
        return _bad(request, str(exc))
    by_id = {r.pk: r for r in visible.filter(pk__in=ids)} if ids else {}
    if len(by_id) != len(ids):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())  # as for any run no link of it opens
        raise Http404("No such run.")  # a stranger's run is as absent as a missing one
    chosen = [by_id[i] for i in ids] + _readable_from_sources(visible, from_sources, set(ids))
    try:
        page = compare_page(chosen, band=band, group_by=request.GET.get("group_by") or None,
                            metrics=[k for k in request.GET.getlist("metrics") if k], max_metrics=COMPARE_MAX_METRICS,
                            max_points=MAX_POINTS)
    except (BadParam, BadGrouping) as exc:
        return _bad(request, str(exc))
    wanted_ids = [r.pk for r in chosen]
    grant = link_grant(request)
    as_member = (set(wanted_ids) if not grant.runs and request.user.is_authenticated  # visible is theirs
                 else set(run_list_for_user(request.user).filter(pk__in=wanted_ids).values_list("pk", flat=True)))
    # Read through anonymous links only: the page names no owner and shows no path (nor does a group's
    # label or column, which name its settings as the differences do).
    if any(r.pk in grant.anonymous and r.pk not in as_member for r in chosen):
        page.scrub(scrub_text)
    signed_in = all(r.pk in as_member for r in chosen)
    return render(request, "runs/compare.html", {
        # Every compared run is ticked; those a source brings (a sweep's) are ticked and fixed: the
        # source's hidden field brings them, and sending each as `runs=` would pass COMPARE_MAX_RUNS.
        "chosen": chosen, "checked": set(ids), "from_source_ids": {r.pk for r in chosen} - set(ids),
        "choices": _choices(visible, chosen), **vars(page),
        "by_column": page.by_column if len(page.columns) > DIFFERENCES_WIDE else None,
        "signed_in_reader": signed_in, "sources": sources, "from_sources": len(chosen) - len(ids),
        **_example_links(chosen, page.parting),
        "band": band, "bands": [(b, BAND_LABELS[b]) for b in BANDS], "group_by": request.GET.get("group_by") or "",
        "max_runs": COMPARE_MAX_RUNS, "shareable": signed_in and len(chosen) <= COMPARE_MAX_RUNS,
        # The experiments and sweeps the runs belong to, up to an experiment's size: for a sweep's hundreds
        # of runs (brought by its source, which the page names) the lookup costs a tenth of the page's
        # time budget.
        **(run_page_extras(chosen) if signed_in and len(chosen) <= COMPARE_MAX_RUNS else {}),
    })
