"""Parameter importance (webapp/sweeps/importance.py): Optuna's fANOVA, as the page names it, hidden
below MIN_COMPLETE_TRIALS with the reason, and a sweep that can never get there says so."""

import math
import random

import optuna
import pytest
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from tests.webapp.sweeps.world import add_trial, make_sweep
from webapp.sweeps import importance
from webapp.sweeps.importance import MIN_COMPLETE_TRIALS, importance_json
from webapp.sweeps.models import Sweep, Trial
from webapp.sweeps.study import study_of

pytestmark = pytest.mark.django_db

SPACE = {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}, "temperature": {"values": [1.0, 2.0]}}


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()  # the importance cache is keyed by sweep id, which a new test database reuses
    yield
    cache.clear()


def trial_rows(sweep: Sweep, rows: list[tuple[dict, float]]) -> list[Trial]:
    """Complete Trial rows (no runs: importance reads the trials only)."""
    return [Trial.objects.create(sweep=sweep, number=i, params=params, state=Trial.State.COMPLETE, value=value,
                                 finished_at=timezone.now()) for i, (params, value) in enumerate(rows)]


def decided_by_the_learning_rate(n: int, seed: int = 3) -> list[tuple[dict, float]]:
    """n trials whose objective is a function of the learning rate alone; the temperature is drawn at
    random and does nothing."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        lr = float(f"{math.exp(rng.uniform(math.log(1e-5), math.log(1e-3))):.6g}")
        rows.append(({"learning_rate": lr, "temperature": rng.choice([1.0, 2.0])}, 0.6 - abs(math.log10(lr) + 4) / 4))
    return rows


def test_four_trials_show_no_importance_and_say_why(client, owner):
    """The case a user met: 4 trials, one at temperature 2 scoring 0.266 against 0.455-0.558."""
    sweep = make_sweep(owner, space=SPACE, n_trials=20)
    trial_rows(sweep, [({"learning_rate": 1e-4, "temperature": 1.0}, 0.455),
                       ({"learning_rate": 3e-4, "temperature": 1.0}, 0.558),
                       ({"learning_rate": 5e-5, "temperature": 1.0}, 0.5),
                       ({"learning_rate": 2e-4, "temperature": 2.0}, 0.266)])
    client.force_login(owner)
    found = client.get(reverse("sweeps:data", args=[sweep.pk])).json()["importance"]
    assert found["ready"] is False and found["values"] == [] and found["evaluator"] == "fANOVA"
    assert found["complete"] == 4 and found["needs"] == MIN_COMPLETE_TRIALS
    assert f"is drawn from {MIN_COMPLETE_TRIALS} complete trials" in found["note"]
    assert "one trial decides which setting ranks first" in found["note"]
    assert found["note"].endswith(f"4 so far, {MIN_COMPLETE_TRIALS - 4} more to go.")
    page = client.get(reverse("sweeps:detail", args=[sweep.pk])).content.decode()
    assert "Parameter importance (fANOVA)" in page and found["note"] in page  # the page says it before any script
    assert '<div id="importance-chart" class="sweep-chart" hidden>' in page


def test_the_setting_that_decides_the_objective_ranks_first(owner):
    sweep = make_sweep(owner, space=SPACE, n_trials=16)
    trials = trial_rows(sweep, decided_by_the_learning_rate(16))
    found = importance_json(sweep, trials)
    assert found["ready"] is True
    (first, share), (second, noise) = found["values"]
    assert first == "learning_rate" and second == "temperature"
    assert share > 0.8 and noise < 0.2 and share + noise == pytest.approx(1)
    assert "Optuna's fANOVA (a random forest of 32 trees, seed 0) over 16 complete trials" in found["note"]
    assert 0 < found["explained"] <= 1 + 1e-9


def test_it_is_optunas_fanova_seeded_so_the_same_trials_draw_the_same_bars(owner):
    sweep = make_sweep(owner, space=SPACE, n_trials=16)
    trials = trial_rows(sweep, decided_by_the_learning_rate(16, seed=8))
    first = importance_json(sweep, trials)
    cache.clear()
    assert importance_json(sweep, trials) == first
    expected = optuna.importance.get_param_importances(
        study_of(sweep, trials), evaluator=optuna.importance.FanovaImportanceEvaluator(n_trees=32, seed=0))
    assert {name: pytest.approx(share) for name, share in first["values"]} == expected


def test_a_finished_small_grid_says_it_never_reaches_the_minimum(client, owner):
    sweep = make_sweep(owner, space={"learning_rate": {"values": [1e-4, 1e-3]}}, method=Sweep.Method.GRID,
                       n_trials=2, state=Sweep.State.FINISHED, finished_at=timezone.now())
    add_trial(sweep, 0, params={"learning_rate": 1e-4})
    add_trial(sweep, 1, params={"learning_rate": 1e-3})
    client.force_login(owner)
    found = client.get(reverse("sweeps:data", args=[sweep.pk])).json()["importance"]
    assert found["ready"] is False and found["reachable"] == 2
    assert found["note"].startswith(f"This sweep finished with 2 complete trials; importance (fANOVA) needs "
                                    f"{MIN_COMPLETE_TRIALS} complete trials")
    assert "more to go" not in found["note"]


def test_a_running_sweep_too_small_for_it_says_so_from_the_start(owner):
    sweep = make_sweep(owner, space=SPACE, n_trials=6)
    assert importance_json(sweep, [])["note"].startswith("This sweep can end with at most 6 complete trials")
    many = make_sweep(owner, space=SPACE, n_trials=MIN_COMPLETE_TRIALS + 1)
    trials = [add_trial(many, 0), add_trial(many, 1, state=Trial.State.PRUNED),
              add_trial(many, 2, state=Trial.State.FAILED)]  # two lost: at most MIN - 1 can complete
    assert importance_json(many, trials)["reachable"] == MIN_COMPLETE_TRIALS - 1
    assert "so it will show no importance" in importance_json(many, trials)["note"]


def test_a_cancelled_sweep_says_it_was_cancelled(owner):
    sweep = make_sweep(owner, space=SPACE, state=Sweep.State.CANCELLED, finished_at=timezone.now())
    trials = trial_rows(sweep, decided_by_the_learning_rate(3))
    assert importance_json(sweep, trials)["note"].startswith("This sweep was cancelled with 3 complete trials;")


def test_trials_that_all_score_the_same_rank_nothing(owner):
    sweep = make_sweep(owner, space=SPACE, n_trials=12)
    trials = trial_rows(sweep, [(params, 0.5) for params, _ in decided_by_the_learning_rate(12)])
    found = importance_json(sweep, trials)
    assert found["ready"] is True and found["values"] == [] and "nothing to rank" in found["note"]


def test_it_is_computed_once_per_set_of_complete_trials(owner, monkeypatch):
    sweep = make_sweep(owner, space=SPACE, n_trials=20)
    trials = trial_rows(sweep, decided_by_the_learning_rate(MIN_COMPLETE_TRIALS))
    calls = []
    real = importance.fanova_main_effects
    monkeypatch.setattr(importance, "fanova_main_effects", lambda s, t: calls.append(len(t)) or real(s, t))
    first = importance_json(sweep, trials)
    assert importance_json(sweep, trials) == first and len(calls) == 1
    trials.append(Trial.objects.create(sweep=sweep, number=len(trials), params={"learning_rate": 1e-4,
                                       "temperature": 1.0}, state=Trial.State.COMPLETE, value=0.6,
                                       finished_at=timezone.now()))
    assert importance_json(sweep, trials)["complete"] == MIN_COMPLETE_TRIALS + 1 and len(calls) == 2
