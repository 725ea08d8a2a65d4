"""What the sweep page draws, as one JSON payload: the page embeds it (json_script) and sweep.js fetches
it again (data.json) after each notice, so the first draw and every redraw read the same thing.

Everything comes from the Trial rows (params, state, value, intermediate values) and one query of their
runs, never from the step metrics: a 200-trial sweep of 3 seeds and 100 steps is 60,000 step rows but
600 run rows, and its page must answer within 300 ms (issue 44). The parameter importance (fANOVA,
webapp/sweeps/importance.py) is the one costly part; it is cached per sweep and per set of completed
trials.
"""

from __future__ import annotations

import functools
import math
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse

from webapp.runs.charts.aggregates import seed_summary
from webapp.runs.launch.config_link import config_link_changes, config_link_token
from webapp.runs.models import Run
from webapp.sweeps.importance import importance_json
from webapp.sweeps.models import Sweep, Trial, TrialRun
from webapp.sweeps.objective import run_value
from webapp.sweeps.services import sweep_best
from webapp.sweeps.space import dimension

RUN_URL_MARK = 999_999_999


def sweep_payload(sweep: Sweep) -> dict[str, Any]:
    """Everything the page shows that changes while the sweep runs (the header's fixed settings are
    rendered once). Two queries (trials, their runs) plus the importance when it is not cached."""
    trials = list(Trial.objects.filter(sweep=sweep).order_by("number"))
    runs = _runs_by_trial(sweep)
    best = sweep_best(trials, sweep.direction)
    counts = {state: 0 for state in Trial.State.values}
    for trial in trials:
        counts[trial.state] = counts.get(trial.state, 0) + 1
    return {
        "sweep": {"id": sweep.pk, "state": sweep.state, "waiting": sweep.waiting, "n_trials": sweep.n_trials,
                  "direction": sweep.direction, "objective": sweep.objective, "mode": sweep.mode,
                  "seeds": sweep.seeds, "counts": counts},
        "dimensions": dimensions_json(sweep),
        "trials": [_trial_json(sweep, t, runs.get(t.pk, [])) for t in trials],
        "importance": importance_json(sweep, trials),
        "best": _best_json(sweep, best),
    }


# --- trials -------------------------------------------------------------------------------------------


def _runs_by_trial(sweep: Sweep) -> dict[int, list[dict[str, Any]]]:
    """trial id -> its runs (id, seed, state, page), one query."""
    url = reverse("runs:detail", args=[RUN_URL_MARK])
    found: dict[int, list[dict[str, Any]]] = {}
    rows = TrialRun.objects.filter(trial__sweep_id=sweep.pk).order_by("trial_id", "seed")
    for trial_id, seed, run_id, state in rows.values_list("trial_id", "seed", "run_id", "run__state"):
        found.setdefault(trial_id, []).append({"id": run_id, "seed": seed, "state": state, "value": None,
                                               "url": url.replace(str(RUN_URL_MARK), str(run_id))})
    return found


def _trial_json(sweep: Sweep, trial: Trial, runs: list[dict[str, Any]]) -> dict[str, Any]:
    steps = [int(s) for s in (trial.intermediate or {}) if str(s).lstrip("-").isdigit()]
    for run in runs:  # each seed's objective, as the trial's value counts it (succeeded runs only)
        series = (trial.seed_series or {}).get(str(run["seed"]))
        if series and run["state"] == Run.State.SUCCEEDED:
            run["value"] = _number(run_value({int(k): v for k, v in series.items()}, sweep))
    values = [r["value"] for r in runs if r["value"] is not None]
    seeds = None
    if trial.state == Trial.State.COMPLETE and len(values) > 1:
        seeds = _seed_summary(tuple(values))
    return {"number": trial.number, "params": trial.params, "state": trial.state, "reason": trial.reason,
            "value": _number(trial.value), "seeds": seeds, "steps": max(steps) if steps else None, "runs": runs}


@functools.lru_cache(maxsize=8192)
def _seed_summary(values: tuple[float, ...]) -> dict[str, Any]:
    """seed_summary, remembered: its bootstrap costs about half a millisecond, which 200 trials made
    most of the page's time, and a complete trial's seeds never change (the function is pure: a fixed
    bootstrap seed). Callers get the same dict: they must not change it."""
    return {k: _number(v) if k != "n" else v for k, v in seed_summary(list(values)).items()}


def _number(value) -> float | None:
    """A finite float, or None (JSON has no NaN; a bad value is shown as missing, never a broken page)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


# --- the search space, for the parallel coordinates ----------------------------------------------------


def dimensions_json(sweep: Sweep) -> list[dict[str, Any]]:
    """Each swept field: how its axis is drawn. `categorical`: values drawn at their index (text, or
    true/false); numeric listed values sit at their value; a log range is drawn at log10."""
    found = []
    for name, entry in sorted((sweep.space or {}).items()):  # by name: jsonb keeps no key order
        try:
            d = dimension(str(name), entry)
        except ValueError:  # a field RunConfig no longer has: drawn from the values the trials hold
            found.append({"name": str(name), "kind": "values", "log": False, "low": None, "high": None,
                          "values": list(entry.get("values", [])) if isinstance(entry, dict) else [],
                          "categorical": True})
            continue
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in d.values)
        found.append({"name": d.name, "kind": d.kind, "log": d.log,
                      "low": d.low if d.kind != "values" else None, "high": d.high if d.kind != "values" else None,
                      "values": list(d.values), "categorical": d.kind == "values" and not numeric})
    return found


# --- the best configuration ----------------------------------------------------------------------------


def _best_json(sweep: Sweep, best: Trial | None) -> dict[str, Any] | None:
    if best is None:
        return None
    return {"number": best.number, "value": _number(best.value), "params": best.params,
            "launch_url": launch_url(sweep, best)}


def launch_config(sweep: Sweep, trial: Trial) -> dict[str, Any]:
    """What "Launch this" launches: the sweep's base settings with the trial's values (its seed is the
    sweep's first)."""
    return {**(sweep.config or {}), **(trial.params or {})}


def launch_url(sweep: Sweep, trial: Trial) -> str:
    """The launch form of the sweep's task and project, filled in with launch_config (the runs app's
    `?config=` link, webapp/runs/launch/config_link.py); the user still submits it."""
    changes = config_link_changes(sweep.task, launch_config(sweep, trial))
    query = {"task": sweep.task_id, "project": sweep.project.name, "config": config_link_token(changes)}
    return f"{reverse('runs:new')}?{urlencode(query)}"
