"""Running a sweep (webapp/sweeps/services.py) with Optuna's real samplers and pruners, against the
database; a simulated worker (simulate.py) stores the steps a test's curve gives, through the real
ingest, so the pruner hears them as it hears a worker's."""

import math

import optuna
import pytest

from tests.webapp.runs.factories import make_task
from tests.webapp.sweeps.simulate import store_steps, train_queued
from trainer.config import RunConfig
from trainer.programs.toy import ToyEcho
from webapp.limits.models import LimitOverride
from webapp.runs.launch.check import Launch
from webapp.runs.models import Run
from webapp.runs.services import run_claim, run_finish, runs_reap_stale
from webapp.sweeps.models import Sweep, Trial
from webapp.sweeps.plan import SweepRefused, SweepSpec
from webapp.sweeps.services import sweep_advance, sweep_cancel, sweep_create
from webapp.sweeps.space import grid, parse_space
from webapp.sweeps.study import study_of

pytestmark = pytest.mark.django_db(transaction=True)

BASE = RunConfig(**{**ToyEcho.suggested_config, "steps": 6, "eval_every": 0, "strategy": "mmgrpo",
                    "rollouts_per_example": 8})
SPACE = {"learning_rate": {"low": 1e-5, "high": 1e-1, "log": True}, "group_size": [4, 8]}


def learning_curve(config: dict, step: int) -> float:
    """A reward that climbs faster with a larger learning rate (1e-5: flat; 1e-1: 0.2 per step)."""
    return min(1.0, step * (5 + math.log10(config["learning_rate"])) / 20)


def launch(owner, **changes) -> Sweep:
    spec = SweepSpec(**{"space": SPACE, "method": "tpe", "seeds": 2, "n_trials": 8, "parallel": 2, **changes})
    return sweep_create(Launch(owner=owner, task=make_task(), config=BASE), spec=spec)


def run_to_the_end(sweep: Sweep, curve=learning_curve) -> Sweep:
    while train_queued(sweep, curve):
        pass
    sweep.refresh_from_db()
    return sweep


def test_a_sweep_queues_parallel_configurations_through_the_queue_and_seeds_each(owner):
    sweep = launch(owner)
    queued = Run.objects.filter(sweep_member__trial__sweep=sweep)
    assert sweep.trials.count() == 2 and queued.count() == 2 * 2
    assert all(r.state == Run.State.QUEUED for r in queued)  # waiting in the fair queue like any run
    for trial in sweep.trials.all():
        seeds = sorted(m.run.config["seed"] for m in trial.members.select_related("run"))
        assert seeds == [0, 1]
        assert {m.run.config["learning_rate"] for m in trial.members.select_related("run")} == {trial.params["learning_rate"]}
    assert sweep.objective == "reward/mean"  # the runs do not evaluate: the last training reward


def test_the_median_pruner_stops_lagging_trials_and_optuna_holds_every_trial_with_its_state(owner):
    sweep = run_to_the_end(launch(owner, pruner="median", options={"startup_trials": 2}))
    trials = list(sweep.trials.all())
    assert sweep.state == Sweep.State.FINISHED and len(trials) == 8
    pruned = [t for t in trials if t.state == Trial.State.PRUNED]
    assert pruned, [(t.params, t.intermediate) for t in trials]
    for trial in pruned:
        assert "median pruner" in trial.reason
        runs = [m.run for m in trial.members.select_related("run")]
        assert {r.state for r in runs} == {Run.State.PRUNED}
        assert all(r.pruned_reason == trial.reason for r in runs)
        assert max(map(int, trial.intermediate)) < BASE.steps  # stopped before the end
    study = study_of(sweep, trials)
    states = {Trial.State.COMPLETE: optuna.trial.TrialState.COMPLETE, Trial.State.PRUNED: optuna.trial.TrialState.PRUNED}
    assert [(t.number, t.state) for t in study.trials] == [(t.number, states[t.state]) for t in trials]
    complete = [t for t in trials if t.state == Trial.State.COMPLETE]
    assert all(t.value == pytest.approx(learning_curve(t.params, BASE.steps)) for t in complete)


def test_hyperband_prunes_through_its_rungs(owner):
    sweep = run_to_the_end(launch(owner, pruner="hyperband", n_trials=10, options={"reduction_factor": 2}))
    trials = list(sweep.trials.all())
    assert sweep.state == Sweep.State.FINISHED
    assert any(t.state == Trial.State.PRUNED and "Hyperband" in t.reason for t in trials)
    assert any("completed_rung_0" in t.system_attrs for t in trials)  # Optuna's own rungs, kept in the rows


def test_a_grid_queues_exactly_the_grid(owner):
    space = {"learning_rate": [1e-3, 1e-2], "group_size": [4, 8], "lora_dropout": {"low": 0.0, "high": 0.1}}
    sweep = launch(owner, space=space, method="grid", n_trials=None, parallel=4, seeds=1, options={"grid_points": 2})
    sweep = run_to_the_end(sweep)
    proposed = sorted(tuple(sorted(t.params.items())) for t in sweep.trials.all())
    expected = sorted(tuple(sorted(c.items())) for c in grid(parse_space(space, BASE), 2))
    assert sweep.n_trials == 8 and proposed == expected
    trained = Run.objects.filter(sweep_member__trial__sweep=sweep)
    assert sorted(tuple(sorted((k, r.config[k]) for k in space)) for r in trained) == expected


def test_random_configurations_are_reproducible_from_the_sweeps_seed(owner):
    def proposed(sampler_seed):
        sweep = run_to_the_end(launch(owner, method="random", sampler_seed=sampler_seed, seeds=1, n_trials=4))
        return [t.params for t in sweep.trials.all()]

    first = proposed(7)
    assert proposed(7) == first
    assert proposed(8) != first
    assert len({t["learning_rate"] for t in first}) == 4


def test_a_failed_run_fails_its_trial_and_the_sweep_goes_on(owner):
    sweep = launch(owner, seeds=1, n_trials=3, parallel=1)
    run = Run.objects.get(sweep_member__trial__sweep=sweep)
    run_finish(run_claim(run.pk, worker="w"), Run.State.FAILED, error="CUDA out of memory")
    trial = sweep.trials.get(number=0)
    assert trial.state == Trial.State.FAILED and "CUDA out of memory" in trial.reason
    assert sweep.trials.count() == 2  # the next configuration is queued
    sweep = run_to_the_end(sweep)
    assert sweep.state == Sweep.State.FINISHED
    assert [t.state for t in sweep.trials.all()] == [Trial.State.FAILED, Trial.State.COMPLETE, Trial.State.COMPLETE]


def test_a_run_whose_worker_was_lost_is_failed_and_the_sweep_goes_on(owner):
    import datetime as dt

    from django.utils import timezone

    sweep = launch(owner, seeds=1, n_trials=2, parallel=1)
    run = run_claim(Run.objects.get(sweep_member__trial__sweep=sweep).pk, worker="w")
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - dt.timedelta(minutes=10))
    assert runs_reap_stale(timeout=dt.timedelta(seconds=60)) == [run.pk]
    run.refresh_from_db()
    assert run.state == Run.State.FAILED and "not resumed" in run.error
    assert sweep.trials.get(number=0).state == Trial.State.FAILED
    assert sweep.trials.count() == 2


def test_an_objective_that_never_appears_marks_the_trial_and_the_sweep_goes_on(owner):
    sweep = launch(owner, seeds=1, n_trials=2, parallel=1, objective="eval/reward/mean")
    sweep = run_to_the_end(sweep)  # the runs store reward/mean only
    assert sweep.state == Sweep.State.FINISHED
    assert all(t.state == Trial.State.FAILED and t.reason.startswith("no objective") for t in sweep.trials.all())


def test_best_mode_and_minimize_read_the_series_as_asked(owner):
    dip = {1: 0.5, 2: 0.1, 3: 0.4}
    sweep = launch(owner, seeds=1, n_trials=1, parallel=1, mode="best", direction="minimize", objective="loss")
    run = run_claim(Run.objects.get(sweep_member__trial__sweep=sweep).pk, worker="w")
    store_steps(run, dip, key="loss")
    run_finish(run, Run.State.SUCCEEDED)
    assert sweep.trials.get().value == pytest.approx(0.1)


def test_cancelling_a_sweep_stops_its_runs_and_queues_nothing_more(owner):
    sweep = launch(owner)
    run = run_claim(Run.objects.filter(sweep_member__trial__sweep=sweep).first().pk, worker="w")
    assert sweep_cancel(sweep) == 4
    run.refresh_from_db()
    assert run.state == Run.State.CANCELLING
    run_finish(run, Run.State.CANCELLED)
    sweep_advance(sweep.pk)
    assert sweep.trials.count() == 2 and Run.objects.filter(state=Run.State.QUEUED).count() == 0
    assert set(sweep.trials.values_list("state", flat=True)) == {Trial.State.FAILED}


@pytest.mark.parametrize(("changes", "field"), [
    ({"space": {"learning_rate": {"low": 1e-3, "high": 1e-5}}}, "learning_rate"),
    ({"space": {"model": {"low": 1, "high": 2}}}, "model"),
    ({"space": {"nope": [1]}}, "nope"),
    ({"method": "bayes"}, "sweep_method"),
    ({"seeds": 0}, "sweep_seeds"),
    ({"parallel": 6}, "sweep_parallel"),  # 6 configurations x 2 seeds at once: over 10 active runs
    ({"options": {"startup_trials": -1}}, "sweep_options"),
    ({"options": {"grid_points": "x"}}, "sweep_options"),
    ({"options": ["startup_trials"]}, "sweep_options"),
    ({"sampler_seed": 2**40}, "sweep_sampler_seed"),
    ({"objective": "reward\x00mean"}, "sweep_objective"),
    ({"space": {"steps": [10**12]}}, "steps"),
    ({"space": {"steps": ["1e999"]}}, "steps"),
    ({"space": {"model": ["a\x00b"]}}, "model"),
])
def test_a_refused_sweep_names_the_field_and_queues_nothing(owner, changes, field):
    with pytest.raises(SweepRefused) as refused:
        launch(owner, **changes)
    assert field in refused.value.errors
    assert not Sweep.objects.exists() and not Run.objects.exists()


def test_a_grid_bigger_than_the_limits_allow_is_refused_before_anything_is_queued(owner):
    LimitOverride.objects.create(user=owner, tokens_per_run=10**6, active_runs=3, queued_runs=3)
    with pytest.raises(SweepRefused) as refused:
        launch(owner, method="grid", space={"group_size": [4, 8], "lora_r": [4, 8]}, n_trials=None, parallel=4, seeds=1)
    assert "sweep_parallel" in refused.value.errors and "4 runs at once" in refused.value.errors["sweep_parallel"]
    with pytest.raises(SweepRefused) as refused:  # one grid point over the per-run token budget
        launch(owner, method="grid", space={"steps": [6, 10**6]}, n_trials=None, parallel=1, seeds=1)
    assert "steps" in refused.value.errors
    assert not Sweep.objects.exists() and not Run.objects.exists()


def test_a_sweep_waits_under_the_limits_instead_of_failing(owner):
    LimitOverride.objects.create(user=owner, active_runs=2, queued_runs=2)
    sweep = launch(owner, seeds=1, n_trials=3, parallel=2)
    Run.objects.create(owner=owner, project=sweep.project, task=sweep.task, config=BASE.to_dict(), total_steps=6)  # another launch meanwhile
    run = run_claim(Run.objects.filter(sweep_member__trial__sweep=sweep).first().pk, worker="w")
    store_steps(run, {1: 0.5})
    run_finish(run, Run.State.SUCCEEDED)
    sweep.refresh_from_db()
    assert sweep.state == Sweep.State.RUNNING and "launch limits" in sweep.waiting
    assert sweep.trials.count() == 2


def test_the_forms_tags_and_notes_reach_every_run(owner):
    spec = SweepSpec(space=SPACE, seeds=2, n_trials=2, parallel=2)
    sweep = sweep_create(Launch(owner=owner, task=make_task(), config=BASE), spec=spec, tags=["lr-search", "sweep"], notes="Which learning rate?")
    runs = Run.objects.filter(sweep_member__trial__sweep=sweep)
    assert runs.count() == 4
    assert all(r.tags == ["sweep", f"sweep-{sweep.pk}", "lr-search"] and r.notes == "Which learning rate?" for r in runs)
