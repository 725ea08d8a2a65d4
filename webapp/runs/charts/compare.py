"""The compare page's curves for groups of runs: per group and metric, the mean over its runs at each
step and a band (webapp/runs/charts/aggregates.py), computed here on the server, so a sweep's page sends
about 200 x (mean, low, high) instead of 600 runs' points, and the browser draws what it gets.

Speed is the point of this module (a sweep's compare page: ~600 runs of ~100 steps in under 300 ms):
- one query reads every row of the runs, with only the wanted metrics extracted as floats by the
  database (webapp/json_keys.py JsonNumber; no metrics JSON is parsed in Python), and the row's time
  as epoch seconds (no datetime objects);
- the rows become one numpy table; the newest row of a (run, step) wins, as on the charts
  (webapp/runs/charts/series.py), by one lexsort;
- every group's values go into one (groups x steps, runs) array, whose means and bands are a few
  whole-array operations (aggregates.band_rows), and whose lists are made once, not per group.
Measured on a sweep of 600 runs x 100 steps in 200 groups (on a shared 2-core machine): SQLite spends
about half of the page in its JSON_EXTRACT (it parses each row's metrics text once per key read, so a
sweep's bands read no wall time or tokens: AXES_MAX_RUNS); PostgreSQL reads jsonb without parsing.
Groups of one run are drawn as on the page before groups existed (series.compared_series).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from django.db import connections
from django.db.models import FloatField, Func

from webapp.json_keys import JsonNumber
from webapp.runs.charts.aggregates import band_rows
from webapp.runs.charts.compare_groups import RunGroup, group_differences, group_runs, grouping_choices
from webapp.runs.charts.series import (
    TOKENS_KEY,
    compared_series,
    config_differences,
    downsample_indices,
    metric_keys,
)
from webapp.runs.models import StepMetric
from webapp.runs.params import BadParam

# Up to this many runs in groups, a band also carries each step's wall time and tokens seen (the page's
# other x axes); a sweep's page, beyond it, draws its bands by step only.
AXES_MAX_RUNS = 100
SIGNIFICANT_DIGITS = 6  # a band's numbers are sent rounded: a chart shows four, the payload halves
KEYS_SAMPLE_RUNS = 20  # runs whose metric keys the chooser lists, when more are compared


class EpochSeconds(Func):
    """A datetime column as seconds since 1970 (a float), computed by the database."""

    output_field = FloatField()

    def as_sqlite(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.get_source_expressions()[0])
        return f"((julianday({sql}) - 2440587.5) * 86400.0)", params

    def as_postgresql(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.get_source_expressions()[0])
        return f"(EXTRACT(EPOCH FROM {sql})::double precision)", params

    def as_sql(self, compiler, connection, **extra):
        raise NotImplementedError(f"EpochSeconds supports PostgreSQL and SQLite, not {connection.vendor}")


@dataclass
class StepTable:
    """The runs' newest row per (run, step), sorted by run then step; `values` (N, keys), NaN where
    the row has no number for the key. `t`: seconds since the run's first stored row; `tokens`:
    completion tokens seen up to the step (NaN for a run that reports none)."""

    run: np.ndarray
    step: np.ndarray
    t: np.ndarray
    tokens: np.ndarray
    values: np.ndarray


def step_table(run_ids: Sequence[int], keys: Sequence[str], *, axes: bool = True) -> StepTable:
    """One query over the runs' StepMetric rows (see the module's docstring). Without `axes`, the wall
    time and tokens seen are not read (NaN): on SQLite each JSON key read parses every row's metrics
    again, and a sweep's page has no time for one more."""
    numbers = {f"v{i}": JsonNumber("metrics", key) for i, key in enumerate(keys)}
    axis_columns = {"_t": EpochSeconds("created_at"), "_tokens": JsonNumber("metrics", TOKENS_KEY)} if axes else {}
    query = (StepMetric.objects.filter(run_id__in=list(run_ids)).order_by()
             .annotate(**axis_columns, **numbers).values_list("run_id", "seq", "step", *axis_columns, *numbers))
    # Executed as Django compiles it, without its per-value converters (a float() call per value, a
    # quarter of the read's time here): the columns are numbers or NULL already.
    sql, params = query.query.get_compiler(using=query.db).as_sql()
    with connections[query.db].cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    table = _as_floats(rows, 3 + len(axis_columns) + len(keys))
    if not len(table):
        empty = np.empty(0)
        return StepTable(empty, empty, empty, empty, np.empty((0, len(keys))))
    if not axes:  # (run, seq, step, t, tokens, values...) all the same
        table = np.insert(table, [3, 3], np.nan, axis=1)
    table = table[np.lexsort((table[:, 1], table[:, 2], table[:, 0]))]  # by run, step, seq
    run, step = table[:, 0], table[:, 2]
    new_run = np.r_[True, run[1:] != run[:-1]]
    run_start = np.flatnonzero(new_run)
    first_t = np.minimum.reduceat(table[:, 3], run_start)  # over every attempt's rows
    run_index = np.cumsum(new_run) - 1
    newest = np.r_[(run[1:] != run[:-1]) | (step[1:] != step[:-1]), True]
    kept, kept_run = table[newest], run_index[newest]
    t = kept[:, 3] - first_t[kept_run]
    tokens = _tokens_seen(kept[:, 4], kept_run)
    return StepTable(kept[:, 0], kept[:, 2], t, tokens, kept[:, 5:])


def _as_floats(rows: list[tuple], width: int) -> np.ndarray:
    """(N, width) floats, NULL as NaN; a value that is no number (text that SQLite's JSON_EXTRACT returns
    for a hand-written row: json_keys.JsonNumber) is NaN too, on a slower path taken only then."""
    try:
        return np.array(rows, dtype=float).reshape(len(rows), width)
    except (TypeError, ValueError):
        def number(v):
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else np.nan
        return np.array([[number(v) for v in row] for row in rows], dtype=float).reshape(len(rows), width)


def _tokens_seen(per_step: np.ndarray, run_index: np.ndarray) -> np.ndarray:
    """Completion tokens up to each row within its run (rows sorted by run, step): a step without the
    key adds nothing; a run without any is NaN throughout (as series.step_axes says None)."""
    counted = np.nan_to_num(per_step, nan=0.0)
    total = np.cumsum(counted)
    if not total.size:
        return total
    starts = np.r_[0, np.flatnonzero(np.diff(run_index)) + 1]
    before = np.r_[0.0, total][starts]  # the running total where each run begins
    seen = total - np.repeat(before, np.diff(np.r_[starts, total.size]))
    reports = np.zeros(run_index.max() + 1, dtype=bool)
    reports[run_index[np.isfinite(per_step)]] = True
    return np.where(reports[run_index], seen, np.nan)


def group_bands(table: StepTable, groups: Sequence[RunGroup], keys: Sequence[str], *, kind: str,
                max_points: int) -> dict[str, dict[int, dict]]:
    """{metric key: {group id: band}} for the groups of two or more runs; a band is `x` (steps), `mean`,
    `low`, `high`, and where known `t` and `tokens` (the mean over the runs that have the step),
    `total` and `downsampled` as a single run's trace. A group with no value of a key gets none.

    Every group at once: the rows become a (groups, steps, runs) array on the steps any group has,
    whose bands are one aggregates.band_rows call per key."""
    out: dict[str, dict[int, dict]] = {key: {} for key in keys}
    banded = [g for g in groups if len(g.runs) > 1]
    if not banded:
        return out
    run_ids = np.array([r.pk for g in banded for r in g.runs], dtype=float)
    order = np.argsort(run_ids)
    group_of = np.repeat(np.arange(len(banded)), [len(g.runs) for g in banded])[order]
    member_of = np.concatenate([np.arange(len(g.runs)) for g in banded])[order]
    rows = np.flatnonzero(np.isin(table.run, run_ids))
    which = np.searchsorted(run_ids[order], table.run[rows])
    steps, column = np.unique(table.step[rows], return_inverse=True)
    shape = (len(banded), steps.size, max(len(g.runs) for g in banded))
    at = (group_of[which], column.ravel(), member_of[which])

    def cells(values: np.ndarray) -> np.ndarray:
        grid = np.full(shape, np.nan)
        grid[at] = values
        return grid.reshape(-1, shape[2])  # (groups x steps, runs)

    t = _mean_rows(cells(table.t[rows])).reshape(shape[:2])
    tokens = _mean_rows(cells(table.tokens[rows])).reshape(shape[:2])
    has_t, has_tokens = np.isfinite(t).any(axis=1), np.isfinite(tokens).any(axis=1)
    t = _rounded(t)
    steps_list = steps.astype(int).tolist()
    for k, key in enumerate(keys):
        mean, low, high = (a.reshape(shape[:2]) for a in band_rows(cells(table.values[rows, k]), kind))
        finite = np.isfinite(mean)
        whole = finite.all(axis=1) & (0 < steps.size <= max_points)
        # Lists of Python floats for the whole array at once (per group, numpy's tolist costs more).
        listed = [_listed(a) for a in (_rounded(mean), _rounded(low), _rounded(high), t, tokens)]
        for g, group in enumerate(banded):
            if whole[g]:  # every step, no downsampling: the rows as they are
                x, picked = steps_list, None
                band = [a[g] for a in listed]
            else:
                has = np.flatnonzero(finite[g])
                if not has.size:
                    continue
                picked = has[downsample_indices(steps[has], mean[g, has], max_points)]
                x = steps[picked].astype(int).tolist()
                band = [_listed(a[picked]) for a in (_rounded(mean[g]), _rounded(low[g]), _rounded(high[g]),
                                                      t[g], tokens[g])]
            out[key][group.id] = {
                "x": x, "mean": band[0], "low": band[1], "high": band[2],
                "t": band[3] if has_t[g] else None, "tokens": band[4] if has_tokens[g] else None,
                "total": int(finite[g].sum()), "downsampled": bool(picked is not None and picked.size < finite[g].sum()),
            }
    return out


def _mean_rows(cells: np.ndarray) -> np.ndarray:
    """Each row's mean over its finite values (NaN where it has none)."""
    present = np.isfinite(cells)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(present, cells, 0.0).sum(axis=1) / present.sum(axis=1)


def _rounded(values: np.ndarray) -> np.ndarray:
    """Each row of `values` (or the 1-D array) to SIGNIFICANT_DIGITS of its largest magnitude (never
    fewer than whole numbers): what the chart shows, in half the JSON."""
    rows = np.atleast_2d(values)
    magnitude = np.where(np.isfinite(rows), np.abs(rows), 0.0).max(axis=1) if rows.size else np.zeros(len(rows))
    with np.errstate(divide="ignore"):
        digits = np.where(magnitude > 0, SIGNIFICANT_DIGITS - 1 - np.floor(np.log10(magnitude)), 0)
    factor = 10.0 ** np.clip(digits, 0, 300)[:, None]
    return (np.rint(rows * factor) / factor).reshape(values.shape)  # as np.round(values, digits) per row


def _listed(values: np.ndarray) -> list:
    """`values` (any shape) as nested lists, NaN as None (JSON has no NaN)."""
    if not np.isnan(values).any():
        return values.tolist()
    return np.where(np.isnan(values), None, values).tolist()


def compare_payload(runs: Sequence, groups: Sequence[RunGroup] | None, keys: Sequence[str], *, band: str,
                    max_points: int) -> dict:
    """What compare.js draws. `runs`: every compared run (id, name, its step page); `groups` (None: every
    run on its own, as with band "none"): id, label, run ids; per metric, `traces` {run id: trace} of
    the runs alone in their group and `bands` {group id: band} of the others."""
    from django.urls import reverse

    singles = list(runs) if groups is None else [g.runs[0] for g in groups if len(g.runs) == 1]
    single_ids = {r.pk for r in singles}  # only these are drawn alone: a click opens their step page
    traces = compared_series(singles, keys, max_points=max_points) if singles else {}
    bands: dict[str, dict[int, dict]] = {}
    if groups is not None and any(len(g.runs) > 1 for g in groups):
        grouped = [r.pk for g in groups if len(g.runs) > 1 for r in g.runs]
        table = step_table(grouped, keys, axes=len(grouped) <= AXES_MAX_RUNS)
        bands = group_bands(table, groups, keys, kind=band, max_points=max_points)
    return {
        "band": band,
        "runs": [{"id": r.pk, "name": str(r), **({"step_url": reverse("runs:step", args=[r.pk, 0])}
                                                 if r.pk in single_ids else {})} for r in runs],
        "groups": None if groups is None else [{"id": g.id, "label": g.label, "runs": [r.pk for r in g.runs]}
                                               for g in groups],
        "metrics": [{"key": k, "traces": {str(rid): t for rid, t in traces.get(k, {}).items()},
                     "bands": {str(gid): b for gid, b in bands.get(k, {}).items()}} for k in keys],
    }


@dataclass
class ComparePage:
    """What the compare page shows of its runs: the metric keys to choose from, the chosen ones, the
    charts' payload, and the settings that differ (a column per group, or per run without groups)."""

    keys: list[str]
    wanted: list[str]
    payload: dict
    columns: list[str]
    differences: list[tuple[str, list[str]]]
    group_choices: list[str]
    # The two sides "Where these runs part" opens (run ids): None unless at least two runs of one task.
    parting: tuple[list[int], list[int]] | None = None

    @property
    def by_column(self) -> list[tuple[str, list[str]]]:
        """The differences turned: (column, its value of each setting), for many columns (a sweep's
        groups), which read better as rows."""
        return [(column, [values[i] for _, values in self.differences]) for i, column in enumerate(self.columns)]

    def scrub(self, scrub_text) -> None:
        """For a reader through anonymous links only: no paths or hosts in settings or group labels."""
        self.differences = [(name, [scrub_text(str(v)) for v in values]) for name, values in self.differences]
        self.columns = [scrub_text(c) for c in self.columns]
        for group in self.payload["groups"] or []:
            group["label"] = scrub_text(group["label"])


def compare_page(chosen: Sequence, *, band: str, group_by: str | None, metrics: list[str], max_metrics: int,
                 max_points: int) -> ComparePage:
    """The compare page for these runs (the caller checked that the request reads them). `band` "none":
    every run on its own; `metrics` empty: reward/mean where the runs have it. BadParam or
    compare_groups.BadGrouping (a 400) for what cannot be drawn."""
    differences = config_differences(chosen)
    groups = group_runs(chosen, differences, group_by=group_by)  # checked even when not drawn
    drawn = None if band == "none" else groups
    keys = metric_keys(_keys_sample(chosen, drawn))
    wanted = metrics or [k for k in ("reward/mean",) if k in keys]
    if len(wanted) > max_metrics:
        raise BadParam(f"Choose at most {max_metrics} metrics.")
    return ComparePage(
        keys=keys, wanted=wanted, payload=compare_payload(chosen, drawn, wanted, band=band, max_points=max_points),
        columns=[str(r) for r in chosen] if drawn is None else [g.header for g in drawn],
        differences=differences if drawn is None else group_differences(drawn, chosen, differences),
        group_choices=grouping_choices(differences), parting=parting_sides(chosen, groups))


PARTING_SIDE_MAX = 16  # webapp/runs/examples/partways.py MAX_RUNS_PER_SIDE


def parting_sides(chosen: Sequence, groups: Sequence[RunGroup]) -> tuple[list[int], list[int]] | None:
    """The sides of "Where these runs part": the first two groups (seed groups by default), or the first
    run against the others when the runs form one group; None for fewer than two runs or several tasks
    (their examples cannot be compared)."""
    if len(chosen) < 2 or len({r.task_id for r in chosen}) > 1:
        return None
    if len(groups) >= 2:
        a, b = groups[0].runs, groups[1].runs
    else:
        a, b = chosen[:1], chosen[1:]
    return [r.pk for r in a][:PARTING_SIDE_MAX], [r.pk for r in b][:PARTING_SIDE_MAX]


def _keys_sample(chosen: Sequence, groups: Sequence[RunGroup] | None) -> list:
    """The runs whose metric keys the chooser lists: all of them, or one of each group spread over at
    most KEYS_SAMPLE_RUNS (a sweep's runs report the same keys; reading every row's keys of 600 runs
    would cost most of the page's time)."""
    if len(chosen) <= KEYS_SAMPLE_RUNS:
        return list(chosen)
    firsts = [g.runs[0] for g in groups] if groups else list(chosen)
    stride = -(-len(firsts) // KEYS_SAMPLE_RUNS)
    return firsts[::stride]
