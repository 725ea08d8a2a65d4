"""Parameter importance on the sweep page: Optuna's fANOVA (FanovaImportanceEvaluator), named as what
it is, and shown only once enough trials completed for its answer to mean something.

Why fANOVA, and not `optuna.importance.get_param_importances`' default: in Optuna 5.0 that default is
PED-ANOVA, and a page that says "fANOVA" must compute fANOVA. fANOVA fits a random forest to the
complete trials (objective from their swept values) and splits the forest's variance into each
setting's main effect. Its forest is seeded, so the same trials always draw the same bars.

Why a minimum: on a handful of points the forest memorises them, and whichever setting happens to
separate the best trial from the rest takes most of the variance (4 trials, the one at temperature 2
scoring 0.266 against 0.455-0.558: Optuna's default gave the learning rate all of it, fANOVA the
temperature 59%). Below MIN_COMPLETE_TRIALS the page says how many it needs instead, or, for a sweep
that can no longer get there (it ended, or too few of its trials are left), says that it never will.

The costly part (0.9 s for 200 trials, 2.7 s for 1000, on this project's busy two-core machine) is
cached per sweep and per set of complete trials: recomputed when a trial completes, never on a reload.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from django.core.cache import cache

from webapp.sweeps.models import Sweep, Trial
from webapp.sweeps.study import study_of

EVALUATOR = "fANOVA"
MIN_COMPLETE_TRIALS = 10
WHY_THE_MINIMUM = ("on fewer, its random forest memorises the few points and one trial decides which setting "
                   "ranks first")
FANOVA_TREES = 32  # Optuna's default is 64; 32 ranks the same at half the time (1000 trials: 2.7 s, not 5.3 s)
FANOVA_SEED = 0  # the forest's seed: the same complete trials always draw the same bars
CACHE_S = 7 * 24 * 3600  # the key changes whenever a trial completes; this only frees memory


def complete_trials(trials: Sequence[Trial]) -> list[Trial]:
    return [t for t in trials if t.state == Trial.State.COMPLETE and t.value is not None and math.isfinite(t.value)]


def fanova_main_effects(sweep: Sweep, trials: Sequence[Trial]) -> dict[str, float]:
    """fANOVA's share of the forest's variance that each swept setting explains on its own, over the
    complete trials (not normalised: what the settings leave, their interactions, is 1 - the sum).
    {} when there is nothing to split: no setting varied, or every trial scored the same."""
    complete = complete_trials(trials)
    if len(complete) < 2:
        return {}
    study = study_of(sweep, complete)
    # Imported here: optuna.importance pulls in scikit-learn and scipy, seconds of every web process's
    # start for a chart only a sweep page of ten complete trials asks for.
    from optuna.importance import FanovaImportanceEvaluator

    evaluator = FanovaImportanceEvaluator(n_trees=FANOVA_TREES, seed=FANOVA_SEED)
    try:
        found = evaluator.evaluate(study)
    except (ValueError, RuntimeError):  # RuntimeError: zero variance in every tree (all values equal)
        return {}
    return {str(name): float(value) for name, value in found.items() if math.isfinite(float(value))}


def cache_key(sweep: Sweep, trials: Sequence[Trial]) -> str:
    """Changes whenever a trial completes (their count, the newest finish), and with the evaluator's
    settings: until then fANOVA's answer for these trials stands."""
    complete = complete_trials(trials)
    newest = max((t.finished_at for t in complete if t.finished_at), default=None)
    return (f"sweep-importance:{EVALUATOR}-{FANOVA_TREES}-{FANOVA_SEED}:{sweep.pk}:{len(complete)}:"
            f"{newest.timestamp() if newest else 0}")


def reachable_complete(sweep: Sweep, trials: Sequence[Trial]) -> int:
    """The most complete trials this sweep can end with: its complete ones if it ended, else every
    configuration it may still try less those pruned or failed."""
    if sweep.state != Sweep.State.RUNNING:
        return len(complete_trials(trials))
    lost = sum(t.state in (Trial.State.PRUNED, Trial.State.FAILED) for t in trials)
    return max(sweep.n_trials - lost, 0)


def waiting_note(sweep: Sweep, trials: Sequence[Trial]) -> str:
    """Why no importance is drawn yet, and whether it ever will be."""
    complete = len(complete_trials(trials))
    needs = f"importance ({EVALUATOR}) needs {MIN_COMPLETE_TRIALS} complete trials: {WHY_THE_MINIMUM}."
    if sweep.state == Sweep.State.FINISHED:
        return f"This sweep finished with {_trials(complete)}; {needs}"
    if sweep.state == Sweep.State.CANCELLED:
        return f"This sweep was cancelled with {_trials(complete)}; {needs}"
    reachable = reachable_complete(sweep, trials)
    if reachable < MIN_COMPLETE_TRIALS:
        return (f"This sweep can end with at most {_trials(reachable)} ({sweep.n_trials} configurations, "
                f"less those pruned or failed), so it will show no importance; {needs}")
    more = MIN_COMPLETE_TRIALS - complete
    return f"Importance ({EVALUATOR}) is drawn from {MIN_COMPLETE_TRIALS} complete trials: {WHY_THE_MINIMUM}. " \
           f"{complete} so far, {more} more to go."


def _trials(n: int) -> str:
    return f"{n} complete trial{'' if n == 1 else 's'}"


def importance_json(sweep: Sweep, trials: Sequence[Trial]) -> dict[str, Any]:
    """What the page's importance chart draws. `ready` once MIN_COMPLETE_TRIALS trials completed;
    `values` [name, share] largest first, shares of `explained` (the part of the variance the settings
    explain one at a time) summing to 1, as Optuna normalises them; `note` says what is drawn, or why not."""
    complete = len(complete_trials(trials))
    found: dict[str, Any] = {"ready": False, "evaluator": EVALUATOR, "complete": complete,
                             "needs": MIN_COMPLETE_TRIALS, "reachable": reachable_complete(sweep, trials),
                             "explained": None, "values": []}
    if complete < MIN_COMPLETE_TRIALS:
        return {**found, "note": waiting_note(sweep, trials)}
    key = cache_key(sweep, trials)
    effects = cache.get(key)
    if effects is None:
        effects = fanova_main_effects(sweep, trials)
        cache.set(key, effects, CACHE_S)
    explained = sum(effects.values())
    if explained <= 0:
        return {**found, "ready": True, "explained": 0.0,
                "note": f"No swept setting explains any of the objective's variance over the {complete} complete "
                        "trials (none varied among them, or they all scored the same): nothing to rank."}
    values = sorted(([name, value / explained] for name, value in effects.items()), key=lambda p: -p[1])
    note = (f"Each swept setting's share of what the settings explain on their own: Optuna's {EVALUATOR} "
            f"(a random forest of {FANOVA_TREES} trees, seed {FANOVA_SEED}) over {complete} complete trials. "
            f"Together they explain {explained:.0%} of the forest's variance; the rest is their interactions.")
    return {**found, "ready": True, "explained": explained, "values": values, "note": note}
