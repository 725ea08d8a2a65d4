"""A run that optimizes prompts first, through the real Celery worker (issue 26, item 2): phase 1
(real MIPROv2, tiny budget) shows its trials and chosen prompts on the run, the training process is
killed between the phases, and the resumed run trains the chosen prompts without searching again."""

import json
import os
import signal

import pytest

from tests.conftest import wait_for
from tests.webapp.runs.factories import make_multihop_task
from tests.workers.test_run_train import training_process_pids, wait_for_state
from trainer.config import RunConfig
from trainer.run.reporting import read_events
from webapp.runs.ingest.texts import fill_call_texts
from webapp.runs.launch.check import Launch
from webapp.runs.models import ModuleCall, Run, StepMetric
from webapp.runs.services import run_create, run_directory, run_resume

NEUTRAL = ("a real worker's DSPy prompt phase, a kill between the phases (no step stored yet) and the "
           "resumed run training the chosen prompts without searching again; storing the phase record "
           "(select_for_update) and the ingest are tested on both backends in "
           "tests/webapp/runs/ingest/test_prompt_phase.py and tests/webapp/runs/ingest/test_store.py, killing and "
           "resuming a real run (steps discarded after the checkpoint) in tests/workers/test_run_train.py")
pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("test_plugins")]


def test_phase_1_shows_its_trials_survives_a_kill_and_phase_2_trains_the_chosen_prompts(
        celery_worker_process, owner, step_gate, tmp_path):
    multihop_task = make_multihop_task(tmp_path)
    step_gate.allow(0)  # phase 1 runs, then the trainer waits before step 1 until the test says
    config = RunConfig(program="dspy_multihop", model="builtin:tiny", rewards=multihop_task.rewards, steps=2,
                       group_size=2, rollouts_per_example=2, examples_per_step=2, max_new_tokens=8,
                       checkpoint_every=1, eval_every=0, prompt_optimizer="mipro_light", prompt_optimizer_trials=2)
    run = run_create(Launch(owner=owner, task=multihop_task, config=config))

    def phase_1_done():
        run.refresh_from_db()
        return run.prompt_optimization.get("phase") == "weights"

    wait_for(phase_1_done, 300, "phase 1's chosen prompts", celery_worker_process.log_path)
    record = run.prompt_optimization
    assert record["optimizer"] == "mipro_light" and len(record["trials"]) >= 2
    assert set(record["modules"]) == {"query", "answer"}
    assert not StepMetric.objects.filter(run=run).exists()

    [pid] = training_process_pids(run)
    os.kill(pid, signal.SIGKILL)  # between the phases
    run = wait_for_state(run, {Run.State.INTERRUPTED, Run.State.FAILED, Run.State.SUCCEEDED},
                         log=celery_worker_process.log_path)
    assert run.state == Run.State.INTERRUPTED, run.error
    step_gate.allow(2)
    run_resume(run)
    run = wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, log=celery_worker_process.log_path)
    assert run.state == Run.State.SUCCEEDED, run.error

    events = read_events(run_directory(run.pk) / "events.jsonl")
    assert [e["event"] for e in events if e["type"] == "prompts"].count("started") == 1  # not searched again
    assert list(StepMetric.objects.filter(run=run).values_list("attempt", "step")) == [(2, 1), (2, 2)]
    run.refresh_from_db()
    assert run.prompt_optimization["trials"] == record["trials"]  # the record of phase 1 stays
    calls = list(ModuleCall.objects.filter(rollout__run=run, module="query"))
    fill_call_texts(calls)
    chosen = record["modules"]["query"]["instructions"]
    assert calls and all(chosen in c.messages[0]["content"] for c in calls), json.dumps(calls[0].messages)[:500]
