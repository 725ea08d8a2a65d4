"""A run of a task on an uploaded dataset trains on that dataset's rows: the supervisor exports
them once per run (every attempt reuses the export) and fails the run clearly when there are none."""

import json

import pytest
from django.core.management import call_command

from tests.conftest import SHARED_DATA
from tests.workers.test_run_train import wait_for_state
from trainer.config import RunConfig
from webapp.datasets.models import Dataset
from webapp.runs.launch.catalog import programs_sync
from webapp.runs.launch.check import Launch
from webapp.runs.models import Program, Run, StepMetric, Task
from webapp.runs.services import run_create
from workers.supervisor import Supervisor, supervise_next

NEUTRAL = ("the supervisor exporting a task's dataset rows once per run and reusing them, failing clearly "
           "without rows, and a real worker training on them; the import (COPY on PostgreSQL) and the "
           "export's queries are tested on both backends in tests/webapp/datasets/test_services.py and "
           "tests/webapp/datasets/test_commands_and_export.py, claim_next in "
           "tests/webapp/scheduling/test_queue.py")
pytestmark = [pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def gsm8k_task(tmp_path, rows: int = 12) -> Task:
    source = tmp_path / "gsm8k-head.jsonl"
    with open(SHARED_DATA / "gsm8k" / "train.jsonl") as full:
        source.write_text("".join(line for _, line in zip(range(rows), full, strict=False)))
    call_command("import_dataset", str(source), "--kind", "math", "--name", "gsm8k-head", "--dev-ratio", "0.25",
                 "--seed", "0")
    programs_sync()
    return Task.objects.create(name="gsm8k-head", title="GSM8K head", program=Program.objects.get(name="math"),
                               dataset=Dataset.objects.get(name="gsm8k-head"),
                               rewards=[{"name": "numeric_match"}, {"name": "length", "params": {"limit": 400}}])


def math_config(**changes) -> RunConfig:
    return RunConfig(program="math", steps=1, group_size=2, rollouts_per_example=2, examples_per_step=2,
                     max_new_tokens=4, max_context_length=512, eval_every=0, checkpoint_every=1,
                     rewards=[{"name": "numeric_match"}, {"name": "length", "params": {"limit": 400}}], **changes)


def test_the_export_is_written_once_and_reused_by_a_resumed_attempt(owner, settings, tmp_path):
    settings.COHORT_RUNS_DIR = tmp_path / "runs"
    run = run_create(Launch(owner=owner, task=gsm8k_task(tmp_path), config=math_config()))
    config = Supervisor(run).run_config()
    train = [json.loads(line) for line in open(config["train_data"])]
    dev = [json.loads(line) for line in open(config["dev_data"])]
    assert (len(train), len(dev), config["corpus_data"] if "corpus_data" in config else None) == (9, 3, None)
    assert {"id", "question", "answer"} <= set(train[0])
    Dataset.objects.filter(name="gsm8k-head").update(train_count=0)  # as if re-uploaded empty meanwhile
    run.attempt = 2
    assert Supervisor(run).run_config()["train_data"] == config["train_data"]  # the same rows again


def test_a_task_whose_dataset_has_no_rows_fails_with_a_clear_error(owner, settings, tmp_path):
    settings.COHORT_RUNS_DIR = tmp_path / "runs"
    programs_sync()
    empty = Dataset.objects.create(name="empty-math", kind="math")
    task = Task.objects.create(name="empty", title="Empty", program=Program.objects.get(name="math"), dataset=empty)
    run = run_create(Launch(owner=owner, task=task, config=math_config()))
    assert supervise_next("gpu0@test") == Run.State.FAILED
    run.refresh_from_db()
    assert "dataset 'empty-math' has no training rows yet" in run.error


@pytest.mark.slow
def test_a_real_worker_trains_a_dataset_task_on_its_rows(celery_worker_process, owner, tmp_path):
    run = run_create(Launch(owner=owner, task=gsm8k_task(tmp_path), config=math_config()))
    run = wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, log=celery_worker_process.log_path)
    assert run.state == Run.State.SUCCEEDED, run.error
    metrics = StepMetric.objects.get(run=run).metrics
    assert "reward/numeric_match" in metrics and "reward/length" in metrics
