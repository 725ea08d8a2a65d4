"""A program that raises, from the trainer to the dashboard: the rollouts that raised are stored with
their errors and shown by the inspector, and a step where most of them raised fails the run with the
first error as the run's error (trainer event log -> Supervisor -> database -> pages)."""

import pytest
from django.urls import reverse

from tests.trainer.flaky_program import flaky_config, flaky_trainer, registered_flaky_echo
from tests.webapp.runs.factories import make_run
from trainer.rollouts.failures import RolloutErrors
from trainer.run.reporting import JsonlReporter
from webapp.runs.models import Rollout, Run
from workers.supervisor import Supervisor

NEUTRAL = ("a real trainer's raising rollouts shipped by the supervisor, the failed run's error and the "
           "inspector page; storing rollout errors, the final transition and the inspector's queries are "
           "tested on both backends in tests/webapp/runs/ingest/test_store.py, tests/webapp/runs/test_models.py "
           "and tests/webapp/runs/inspector/test_views.py")
pytestmark = [pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def test_rollout_errors_reach_the_inspector_and_a_mostly_raising_step_fails_the_run(
        client, owner, settings, tmp_path, model_cache_dir):
    pytest.importorskip("torch")
    settings.COHORT_RUNS_DIR = tmp_path / "runs"
    run = make_run(owner, state=Run.State.RUNNING)
    supervisor = Supervisor(run)
    supervisor.run_dir.mkdir(parents=True)
    with registered_flaky_echo():
        trainer = flaky_trainer(flaky_config(tmp_path / "data", steps=2), supervisor.run_dir,
                                JsonlReporter(supervisor.tail.path), model_cache_dir)
        program = trainer.parts.program.program
        program.raise_for = {"e1"}  # step 1: a quarter of the rollouts raise, the run goes on
        assert trainer.run(stop_after=1) == "stopped"
        program.raise_for = {"e0", "e1", "e3"}  # step 2: three quarters raise
        with pytest.raises(RolloutErrors):
            trainer.run()
    supervisor.ship()
    assert supervisor.finish(1) == Run.State.FAILED

    run.refresh_from_db()
    assert run.current_step == 1
    assert run.error.startswith("RolloutErrors: 12 of 16 trajectories raised in step 2; first error (example 'e")
    assert "ZeroDivisionError: cannot echo e" in run.error and "in program step of module 'echo'" in run.error
    raised = Rollout.objects.filter(run=run, step=1).exclude(error="")
    assert sorted(raised.values_list("example_id", flat=True)) == ["e1"] * 4
    assert all(r.failed and r.error.startswith("ZeroDivisionError: cannot echo e1\n") for r in raised)

    client.force_login(owner)
    html = client.get(reverse("runs:trajectories", args=[run.pk, 1]), {"example": "e1"}).content.decode()
    assert "4 rollouts raised" in html and html.count('class="error-box"') == 4
    assert html.count('<span class="error-headline">ZeroDivisionError: cannot echo e1</span>') == 4
    detail = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "12 of 16 trajectories raised in step 2" in detail
