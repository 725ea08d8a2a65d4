"""An experiment's runs through the real Celery worker, and the Experiment page's numbers checked
against a direct evaluation of each arm (issue 26, item 3): the unadapted program and the
prompt-optimized one evaluated afresh, MMGRPO and BetterTogether evaluated from their final
checkpoints, by the trainer's one evaluation code, give exactly the page's scores."""

import shutil

import pytest

from tests.webapp.runs.factories import make_multihop_task
from tests.workers.test_run_train import wait_for_state
from trainer.config import RunConfig
from trainer.run.loop import Trainer
from trainer.run.reporting import JsonlReporter
from webapp.experiments.selectors import experiment_table
from webapp.experiments.services import experiment_create
from webapp.runs.launch.check import Launch
from webapp.runs.models import Run
from webapp.runs.services import run_directory

NEUTRAL = ("a real worker training an experiment's two runs, and the Experiment page's scores equal to a "
           "direct evaluation of each arm by the trainer; queueing the experiment and reading its table from "
           "stored evaluations are tested on both backends in tests/webapp/experiments/test_experiments.py, "
           "a real worker's claim and ingest in tests/workers/test_run_train.py and "
           "tests/webapp/runs/ingest/test_store.py")
pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("test_plugins")]


def direct_evaluation(run: Run, scratch, model_cache_dir, *, after: bool) -> float:
    """The dev score of one arm, computed again in this process from the run's folder: its config, its
    phase-1 prompts (if any) and, for the trained arms, its final checkpoint."""
    folder = scratch / f"run-{run.pk}-{'after' if after else 'before'}"
    shutil.copytree(run_directory(run.pk), folder)
    config = RunConfig.from_file(folder / "config.json")
    trainer = Trainer(config, folder, JsonlReporter(scratch / "ignored.jsonl"), model_cache_dir=model_cache_dir)
    try:
        if config.prompt_optimizer != "none":
            from trainer.dspy.prompt_phase import run_prompt_phase

            run_prompt_phase(trainer)  # loads the prompts phase 1 chose (never searches again)
        if after:
            assert trainer.resume() == config.steps
        return trainer.evaluate(config.steps if after else 0)["eval/reward/mean"]
    finally:
        trainer.close()


def test_the_pages_numbers_equal_a_direct_evaluation_of_each_arm(celery_worker_process, owner, tmp_path,
                                                                 model_cache_dir):
    task = make_multihop_task(tmp_path)
    config = RunConfig(program="dspy_multihop", model="builtin:tiny", rewards=task.rewards, steps=1, group_size=2,
                       rollouts_per_example=2, examples_per_step=2, max_new_tokens=8, checkpoint_every=1,
                       eval_size=4, prompt_optimizer="mipro_light", prompt_optimizer_trials=2)
    experiment = experiment_create(Launch(owner=owner, task=task, config=config), seeds=1)
    for member in experiment.members.select_related("run"):
        run = wait_for_state(member.run, {Run.State.SUCCEEDED, Run.State.FAILED}, log=celery_worker_process.log_path)
        assert run.state == Run.State.SUCCEEDED, run.error

    _, rows = experiment_table(experiment)
    shown = {row.arm: row.cells[0].value for row in rows}
    assert all(value is not None for value in shown.values()), shown
    runs = {m.kind: m.run for m in experiment.members.select_related("run")}
    direct = {
        "unadapted": direct_evaluation(runs["weights"], tmp_path, model_cache_dir, after=False),
        "po": direct_evaluation(runs["both"], tmp_path, model_cache_dir, after=False),
        "mmgrpo": direct_evaluation(runs["weights"], tmp_path, model_cache_dir, after=True),
        "bettertogether": direct_evaluation(runs["both"], tmp_path, model_cache_dir, after=True),
    }
    assert shown == pytest.approx(direct, abs=1e-12)
