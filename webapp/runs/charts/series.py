"""Metric series for the charts: per-series arrays from a run's column blocks and rows
(webapp/runs/charts/blocks.py), server-side downsampling of long series (MinMaxLTTB, tsdownsample), the
x-axis alternatives (wall time, tokens seen), the per-module heatmaps and the run comparison.

A series is one metric key (`reward/mean`, `group_var/rewriter`, ...) as (step, value) pairs. When a
step was stored by several attempts (a resumed run re-does the steps after its checkpoint), the
newest row (highest seq) wins, so a chart shows what the run ended with.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from django.db import connection
from django.utils import timezone
from tsdownsample import MinMaxLTTBDownsampler

from trainer.run.events import finite_or_none
from webapp.json_keys import json_key
from webapp.runs.charts import blocks as series_store
from webapp.runs.models import Run, StepMetric

# Heatmap families: the per-module series `<family>/<module>` the trainer reports each step.
HEATMAP_FAMILIES = {
    "group_var": "Group reward variance per module",
    "zero_var_share": "Zero-variance groups per module (share)",
}


@dataclass
class Series:
    """One metric over steps, NaN where the value was null (a gap in the chart)."""

    steps: np.ndarray  # (n,) int64, increasing
    values: np.ndarray  # (n,) float64

    def window(self, from_step: int | None, to_step: int | None) -> Series:
        lo = 0 if from_step is None else int(np.searchsorted(self.steps, from_step, side="left"))
        hi = self.steps.size if to_step is None else int(np.searchsorted(self.steps, to_step, side="right"))
        return Series(self.steps[lo:hi], self.values[lo:hi])


def _collect(rows: Iterable[tuple], keys: Sequence[str] | None) -> tuple[dict[str, dict[int, float | None]], int]:
    """rows in seq order: (seq, step, metrics dict) when keys is None, else (seq, step, v_1..v_k)."""
    per_key: dict[str, dict[int, float | None]] = {}
    last_seq = 0
    for row in rows:
        seq, step = row[0], row[1]
        last_seq = max(last_seq, seq)
        items = row[2].items() if keys is None else zip(keys, row[2:], strict=True)
        for key, value in items:
            if keys is not None and value is None and key not in per_key:
                continue  # the key is absent from this row (the JSON key gives None): no point
            per_key.setdefault(key, {})[step] = finite_or_none(value)  # a later seq overwrites
    return per_key, last_seq


def metric_series(run: Run, *, keys: Sequence[str] | None = None, from_step: int | None = None,
                  to_step: int | None = None) -> tuple[dict[str, Series], int]:
    """The run's series (all of them, or only `keys`) within [from_step, to_step], and the highest
    seq read, from the run's stored blocks and the rows of the rest (webapp/runs/charts/blocks.py)."""
    return table_series(series_store.read_table(run.pk, from_step=from_step, to_step=to_step), keys)


def table_series(table: series_store.SeriesTable, keys: Sequence[str] | None = None) -> tuple[dict[str, Series], int]:
    """A SeriesTable's columns as Series (only `keys`, where given), and its highest seq."""
    series = {}
    for key in table.keys if keys is None else keys:
        column = table.column(key)
        if column is not None and column[0].size:
            series[key] = Series(column[0], np.ascontiguousarray(column[1]))
    return series, table.last_seq


def downsample_indices(steps: np.ndarray, values: np.ndarray, max_points: int) -> np.ndarray:
    """Indices of at most `max_points` points that draw like the whole series: MinMaxLTTB (min/max
    preselection, then Largest-Triangle-Three-Buckets) keeps spikes and the first and last points.
    NaN values (gaps) are left out of a downsampled series; short series come back whole."""
    n = steps.size
    if n <= max_points:
        return np.arange(n)
    finite = np.flatnonzero(np.isfinite(values))
    if finite.size <= max_points:
        return finite
    picked = MinMaxLTTBDownsampler().downsample(steps[finite], values[finite], n_out=max_points)
    return finite[np.asarray(picked, dtype=np.int64)]


def series_payload(series: Series, max_points: int) -> dict:
    """JSON for one trace: x, y (None for gaps), total points in range, whether it was downsampled."""
    idx = downsample_indices(series.steps, series.values, max_points)
    y = series.values[idx]
    return {
        "x": series.steps[idx].tolist(),
        "y": [None if math.isnan(v) else v for v in y.tolist()],
        "total": int(series.steps.size),
        "downsampled": bool(idx.size < series.steps.size),
    }


TOKENS_KEY = series_store.TOKENS_KEY  # whose running sum is "tokens seen"


def _axes_table(rows: Iterable[tuple]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, object]:
    """rows in seq order: (seq, step, created_at, completion tokens or None). Per step (the newest
    row wins, as for the series): seconds since the run's first stored row, and the completion tokens
    seen up to and including that step (None when no step reported any). Also the first created_at."""
    by_step: dict[int, tuple] = {}
    first = None
    for _seq, step, created_at, tokens in rows:
        first = created_at if first is None or created_at < first else first
        by_step[step] = (created_at, tokens)
    steps = np.fromiter(sorted(by_step), dtype=np.int64, count=len(by_step))
    t = np.asarray([(by_step[s][0] - first).total_seconds() for s in steps.tolist()], dtype=float)
    per_step = [finite_or_none(by_step[s][1]) for s in steps.tolist()]
    tokens = None
    if any(v is not None for v in per_step):
        tokens = np.cumsum([v or 0.0 for v in per_step], dtype=float)  # a step without the key adds nothing
    return steps, t, tokens, first


def _pick(table_steps: np.ndarray, values: np.ndarray | None, steps: np.ndarray) -> list | None:
    if values is None:
        return None
    idx = np.searchsorted(table_steps, steps)
    return values[np.clip(idx, 0, max(0, table_steps.size - 1))].tolist() if table_steps.size else []


def step_axes(run: Run, steps: Iterable[int], *, table: series_store.SeriesTable | None = None) -> dict:
    """The x-axis alternatives of the charts for `steps` (ascending, unique): `t`, seconds since the
    run's first stored step (StepMetric.created_at), and `tokens`, cumulative completion tokens (None
    when the run reports none). `now_t` is the present on the same clock, so a browser can place a
    point that arrives over the websocket without a stored time. `table`, when given, is the run's
    table from its first step on (the overview just read); otherwise the steps up to the last wanted
    one are read from the run's blocks and rows."""
    wanted = np.unique(np.fromiter((int(s) for s in steps), dtype=np.int64))
    if not wanted.size:  # an empty page (nothing new yet): only the clock, from the first stored row
        first = StepMetric.objects.filter(run=run).order_by("seq").values_list("created_at", flat=True).first()
        return {"step": [], "t": [], "tokens": [],
                "now_t": None if first is None else (timezone.now() - first).total_seconds()}
    if table is not None:
        table_steps, t, tokens, first = _axes_of_table(table)
    else:
        # Tokens seen at a step need every step before it: the blocks before the wanted ones say
        # their sums, so only the wanted steps' blocks are read.
        block = series_store.block_of(int(wanted[0]))
        window = series_store.read_table(run.pk, from_step=block * series_store.BLOCK_STEPS, to_step=int(wanted[-1]))
        table_steps, t, tokens, first = _axes_of_table(
            window, first=series_store.first_stored_at(run.pk), tokens_before=series_store.tokens_before(run.pk, block))
    wanted = wanted[np.isin(wanted, table_steps)]
    return {
        "step": wanted.tolist(), "t": _pick(table_steps, t, wanted), "tokens": _pick(table_steps, tokens, wanted),
        "now_t": None if first is None else timezone.now().timestamp() - first,
    }


def _axes_of_table(table: series_store.SeriesTable, *, first: float | None = None,
                   tokens_before: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, float | None]:
    """Per step of the table: seconds since the run's first stored row (`first`, by default the
    table's), the completion tokens seen up to and including the step (`tokens_before` the table's
    first step, plus its own; None when no step reported any), and `first`."""
    if not table.steps.size:
        return table.steps, np.zeros(0), None, first
    first = float(table.created.min()) if first is None else first
    t = table.created - first
    tokens = None
    column = table.column(TOKENS_KEY)
    reported = column is not None and bool(np.isfinite(column[1]).any())
    if reported or tokens_before is not None:
        per_step = np.zeros(table.steps.size)
        if reported:
            row = table.keys.index(TOKENS_KEY)
            per_step = np.where(table.present[row] & np.isfinite(table.values[row]), table.values[row], 0.0)
        tokens = (tokens_before or 0.0) + np.cumsum(per_step, dtype=float)  # a step without the key adds nothing
    return table.steps, t, tokens, first


def metric_heatmap(run: Run, family: str, *, max_columns: int) -> dict:
    """Rows: modules; columns: steps (equal-width step bins of their mean when the run has more
    steps than `max_columns`); z: the `<family>/<module>` values (None where unknown)."""
    series, _ = metric_series(run)
    prefix = family + "/"
    modules = sorted(k[len(prefix):] for k in series if k.startswith(prefix))
    if not modules:
        return {"family": family, "title": HEATMAP_FAMILIES[family], "modules": [], "x": [], "z": [], "bin": 1}
    steps = np.unique(np.concatenate([series[prefix + m].steps for m in modules]))  # (S,)
    grid = np.full((len(modules), steps.size), np.nan)  # (modules, S)
    for row, module in enumerate(modules):
        s = series[prefix + module]
        grid[row, np.searchsorted(steps, s.steps)] = s.values
    width = max(1, math.ceil(steps.size / max_columns))
    if width > 1:
        n_bins = math.ceil(steps.size / width)
        padded = np.full((len(modules), n_bins * width), np.nan)
        padded[:, : steps.size] = grid
        blocks = padded.reshape(len(modules), n_bins, width)
        with np.errstate(invalid="ignore"), _quiet_nanmean():
            grid = np.nanmean(blocks, axis=2)  # (modules, n_bins); an all-NaN bin stays NaN
        steps = steps[::width]  # the first step of each bin
    return {
        "family": family, "title": HEATMAP_FAMILIES[family], "modules": modules, "x": steps.tolist(), "bin": width,
        "z": [[None if math.isnan(v) else v for v in row] for row in grid.tolist()],
    }


class _quiet_nanmean:
    """nanmean of an all-NaN bin warns; such a bin (no step reported the module) is expected."""

    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._catch.__exit__(*exc)


def metric_keys(runs: Sequence[Run]) -> list[str]:
    """Every metric key the runs reported, sorted, listed in the database (jsonb_object_keys on
    PostgreSQL, json_each on SQLite); elsewhere the rows are read in chunks."""
    ids = [r.pk for r in runs]
    if not ids:
        return []
    table = connection.ops.quote_name(StepMetric._meta.db_table)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT DISTINCT jsonb_object_keys(metrics) FROM {table} WHERE run_id = ANY(%s)", [ids])
            return sorted(row[0] for row in cursor.fetchall())
    if connection.vendor == "sqlite":  # json_each reads the keys in SQLite's C, a quarter of json.loads' time
        marks = ", ".join(["%s"] * len(ids))
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT DISTINCT j.key FROM {table} AS m, json_each(m.metrics) AS j "
                           f"WHERE m.run_id IN ({marks})", ids)
            return sorted(row[0] for row in cursor.fetchall())
    keys: set[str] = set()
    for metrics in StepMetric.objects.filter(run_id__in=ids).values_list("metrics", flat=True).iterator(chunk_size=2000):
        keys.update(metrics)
    return sorted(keys)


def compared_series(runs: Sequence[Run], keys: Sequence[str], *, max_points: int) -> dict[str, dict[int, dict]]:
    """{metric key: {run id: trace payload}} for several runs in one query (only those keys read)."""
    if not runs or not keys:
        return {}
    annotations = {f"k{i}": json_key("metrics", key) for i, key in enumerate(keys)}
    rows = (StepMetric.objects.filter(run__in=[r.pk for r in runs]).order_by("run_id", "seq")
            .annotate(_tokens=json_key("metrics", TOKENS_KEY), **annotations)
            .values_list("run_id", "seq", "step", "created_at", "_tokens", *annotations))
    per_run: dict[int, list[tuple]] = {}
    for row in rows.iterator(chunk_size=2000):
        per_run.setdefault(row[0], []).append(row[1:])
    out: dict[str, dict[int, dict]] = {key: {} for key in keys}
    for run in runs:
        run_rows = per_run.get(run.pk, [])
        raw, _ = _collect([(r[0], r[1], *r[4:]) for r in run_rows], list(keys))
        table_steps, t, tokens, _ = _axes_table(r[:4] for r in run_rows)
        for key, by_step in raw.items():
            steps = np.fromiter(sorted(by_step), dtype=np.int64, count=len(by_step))
            values = np.asarray([np.nan if by_step[s] is None else by_step[s] for s in steps.tolist()], dtype=float)
            payload = series_payload(Series(steps, values), max_points)
            # Each point's wall time and tokens seen, for the x-axis choice of the compare page.
            x = np.asarray(payload["x"], dtype=np.int64)
            payload["t"], payload["tokens"] = _pick(table_steps, t, x), _pick(table_steps, tokens, x)
            out[key][run.pk] = payload
    return out


def flatten_config(config: dict, prefix: str = "") -> dict[str, str]:
    """Nested config dicts as dotted keys; values as compact JSON-ish text for comparison."""
    import json

    flat: dict[str, str] = {}
    for key, value in (config or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten_config(value, name + "."))
        else:
            flat[name] = json.dumps(value, sort_keys=True, default=str)
    return flat


def config_differences(runs: Sequence[Run]) -> list[tuple[str, list[str]]]:
    """(setting, value per run) for every setting whose value is not the same in all runs, including
    the task and program; a setting a run does not have shows as an empty string."""
    # Only the top-level settings that are not the same everywhere are flattened: a sweep's 600 configs of
    # 66 settings flattened whole cost 70 ms, most of it on settings every run shares.
    configs = [r.config or {} for r in runs]
    varying = [k for k in sorted(set().union(*configs)) if not _same_everywhere(configs, k)] if configs else []
    flats = [{"task": r.task.name, "program": r.task.program.name,
              **flatten_config({k: c[k] for k in varying if k in c})} for r, c in zip(runs, configs, strict=True)]
    names = sorted(set().union(*flats)) if flats else []
    rows = []
    for name in names:
        values = [f.get(name, "") for f in flats]
        if len(set(values)) > 1:
            rows.append((name, values))
    return rows


def _same_everywhere(configs: Sequence[dict], key: str) -> bool:
    """Whether every config has `key` with one value (of one type: 1 and true differ, as in flatten_config)."""
    missing = object()
    first = configs[0].get(key, missing)
    return first is not missing and all(
        (v := c.get(key, missing)) is first or (type(v) is type(first) and v == first) for c in configs)
