"""A real sweep against a real Celery worker and the database: Optuna's TPE over the toy task's learning
rate (a log range) and group size, two seeds per configuration, two configurations at once, the median
pruner; the worker is killed mid-trial and a fresh one finishes the sweep.

The test decides when every step happens: the worker's trainers wait at the step gate (one line per
run, trainer/run/gate.py), and the test lets a run take its next step only once the sweep has read
(and the pruner judged) the one before (TrialRun.judged_step), so what the pruner sees is the same on
a fast or a busy machine."""

import datetime as dt
import os
import signal

import optuna
import pytest

from tests.conftest import celery_worker, service_env, wait_for
from tests.webapp.runs.factories import make_task
from tests.workers.test_run_train import toy_config, training_process_pids
from trainer.run.gate import GATE_ENV
from webapp.celery import app
from webapp.runs.launch.check import Launch
from webapp.runs.models import Run, StepMetric
from webapp.sweeps.models import Sweep, Trial, TrialRun
from webapp.sweeps.plan import SweepSpec
from webapp.sweeps.services import sweep_create
from webapp.sweeps.study import study_of

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.backend_neutral(
    reason="the sweep's queries and row locks (trials queued, settled and pruned; the reaper's step) run on both "
           "backends in tests/webapp/sweeps/test_services.py; this test adds the processes: a real worker and its "
           "trainers, a kill -9, a fresh worker")]

STEPS = 4
TRIALS = 8
SPEC = SweepSpec(space={"learning_rate": {"low": 1e-4, "high": 0.3, "log": True}, "group_size": [4, 8]},
                 method="tpe", seeds=2, n_trials=TRIALS, parallel=2, pruner="median", sampler_seed=3,
                 options={"startup_trials": 2})


def step_runs_one_at_a_time(gate, sweep: Sweep) -> None:
    """Lets each running run of `sweep` take its next step once the sweep has judged its last one."""
    for member in TrialRun.objects.filter(trial__sweep=sweep, run__state=Run.State.RUNNING).select_related("run"):
        stored = StepMetric.objects.filter(run_id=member.run_id).count()
        if member.judged_step >= stored and gate.named(f"run-{member.run_id}").limit() <= stored:
            gate.allow(stored + 1, run=f"run-{member.run_id}")


def test_a_tpe_sweep_prunes_lagging_trials_and_survives_a_killed_worker(owner, tmp_path, model_cache_dir, runs_dir,
                                                                        settings, step_gate):
    from workers.tasks import reap_stale_runs_task

    settings.COHORT_RUNS_DIR = runs_dir
    app.control.purge()
    env = service_env(COHORT_RUNS_DIR=str(runs_dir), COHORT_MODEL_CACHE=str(model_cache_dir),
                      **{GATE_ENV: str(step_gate.path)})
    step_gate.allow(1)  # every run takes its first step, then waits for the test
    config = toy_config(steps=STEPS, strategy="mmgrpo", rollouts_per_example=8, checkpoint_every=0)
    sweep = sweep_create(Launch(owner=owner, task=make_task(), config=config), spec=SPEC)

    with celery_worker(tmp_path / "first.log", env, app=app, name="first") as first:
        killed = wait_for(lambda: TrialRun.objects.filter(trial__sweep=sweep, judged_step=1).first(), 240,
                          "the first run's first step, judged", first.log_path).run
        pids = training_process_pids(killed)
        os.killpg(first.pid, signal.SIGKILL)  # the worker and its pool, mid-trial
        for pid in pids:  # and its trainer: the machine is gone
            os.kill(pid, signal.SIGKILL)
        first.wait(timeout=30)

    settings.COHORT_HEARTBEAT_TIMEOUT_S = 0  # the reaper's periodic pass, now: that worker is silent
    assert reap_stale_runs_task() == [killed.pk]
    killed.refresh_from_db()
    assert killed.state == Run.State.FAILED and "not resumed" in killed.error
    failed_trial = Trial.objects.get(members__run=killed)
    assert failed_trial.state == Trial.State.FAILED

    with celery_worker(tmp_path / "second.log", env, app=app, name="second") as second:
        def finished():
            step_runs_one_at_a_time(step_gate, sweep)
            sweep.refresh_from_db()
            return sweep.state == Sweep.State.FINISHED
        wait_for(finished, 900, "the sweep to finish on the fresh worker", second.log_path)

    trials = list(sweep.trials.all())
    assert len(trials) == TRIALS
    states = [t.state for t in trials]
    pruned = [t for t in trials if t.state == Trial.State.PRUNED]
    assert pruned, [(t.params, t.intermediate, t.state) for t in trials]
    for trial in pruned:  # by the pruner, at a step boundary before the end: every seed's run ended pruned
        assert trial.reason.startswith("Pruned by the median pruner")
        for run in Run.objects.filter(sweep_member__trial=trial):
            assert run.state == Run.State.PRUNED and run.pruned_reason == trial.reason
            assert run.current_step < STEPS
    assert states.count(Trial.State.FAILED) == 1 and Trial.State.COMPLETE in states
    study = study_of(sweep, trials)  # Optuna's study holds every trial with its state
    as_optuna = {Trial.State.COMPLETE: "COMPLETE", Trial.State.PRUNED: "PRUNED", Trial.State.FAILED: "FAIL"}
    assert [t.state.name for t in study.trials] == [as_optuna[s] for s in states]
    assert study.best_trial.value == max(t.value for t in trials if t.value is not None)
    assert isinstance(study.sampler, optuna.samplers.TPESampler)
    for trial in trials:  # every configuration trained (or was stopped) once per seed, nothing doubled
        assert sorted(trial.members.values_list("seed", flat=True)) == [0, 1]
    assert not Run.objects.filter(state__in=Run.ACTIVE_STATES).exists()
    assert dt.timedelta(0) <= sweep.finished_at - sweep.created_at
