"""Runs of plugin programs through a real Celery worker and training subprocess, with the test
plugins of tests/plugins on the workers' PYTHONPATH: the demo program trains with its plugin rewards;
a run of the broken plugin's program fails with the plugin's error as the run's error."""

import json

import pytest

from tests.workers.test_run_train import wait_for_state
from trainer.config import RunConfig
from trainer.programs import program_info
from webapp.datasets.models import Dataset
from webapp.datasets.services import ImportOptions, SourceFile, dataset_import
from webapp.runs.launch.catalog import programs_sync
from webapp.runs.launch.check import Launch
from webapp.runs.models import Program, Rollout, Run, StepMetric, Task
from webapp.runs.services import run_create

NEUTRAL = ("a real worker training a plugin program with its plugin rewards, and a broken plugin's error "
           "becoming the run's error; a real worker's claim and ingest are tested on both backends in "
           "tests/workers/test_run_train.py and tests/webapp/runs/ingest/test_store.py, the generic-kind dataset "
           "import in tests/webapp/datasets/test_generic_kind.py, sync_programs in "
           "tests/webapp/runs/test_plugins.py")
pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("test_plugins")]

KIND = "fields:question,answer"
WORDS = ("apple", "river", "stone", "cloud")


def demo_task(tmp_path) -> Task:
    path = tmp_path / "demo.jsonl"
    path.write_text("".join(json.dumps({"id": f"d{i}", "question": f"say {w}", "answer": w}) + "\n"
                            for i, w in enumerate(WORDS)))
    dataset = Dataset.objects.create(name="demo", kind=KIND)
    assert dataset_import(dataset, [SourceFile(str(path), "demo.jsonl")], ImportOptions(kind=KIND)).ok
    return Task.objects.create(name="demo", title="Demo", program=Program.objects.get(name="demo_echo"),
                               dataset=dataset, rewards=program_info("demo_echo")["default_rewards"])


def test_a_plugin_program_trains_with_its_plugin_rewards(celery_worker_process, owner, tmp_path):
    programs_sync()
    task = demo_task(tmp_path)
    config = RunConfig(**{**program_info("demo_echo")["suggested_config"], "program": "demo_echo", "steps": 2,
                          "checkpoint_every": 1, "rewards": task.rewards})
    run = run_create(Launch(owner=owner, task=task, config=config))
    run = wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, log=celery_worker_process.log_path)
    assert run.state == Run.State.SUCCEEDED, run.error
    assert list(StepMetric.objects.filter(run=run).values_list("step", flat=True)) == [1, 2]
    rollouts = Rollout.objects.filter(run=run)
    assert rollouts.count() == 2 * config.examples_per_step * config.rollouts_per_example
    for rollout in rollouts:
        assert set(rollout.reward_components) == {"demo_overlap", "demo_len"}
        assert rollout.example_id in {f"d{i}" for i in range(len(WORDS))}


def test_a_run_of_an_unavailable_plugin_program_fails_with_the_plugin_error(celery_worker_process, owner):
    programs_sync()
    task = Task.objects.create(name="broken", title="Broken", program=Program.objects.get(name="broken_program"),
                               rewards=[{"name": "exact_match", "weight": 1.0, "params": {}}])
    run = run_create(Launch(owner=owner, task=task, config=RunConfig(program="broken_program", steps=2)))
    run = wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, log=celery_worker_process.log_path)
    assert run.state == Run.State.FAILED
    assert run.error == ("program 'broken_program' is unavailable: cohort-broken-plugin 0.1.0: RuntimeError: "
                         "broken on purpose")
    assert not StepMetric.objects.filter(run=run).exists()
