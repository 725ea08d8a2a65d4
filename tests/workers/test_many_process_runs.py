"""Runs on two processes through the real Celery workers: a worker reports how many GPUs it may use,
a run asking for two processes goes only to a worker with two (fake GPUs: the ranks train on this
CPU with gloo), the run page's data has one stream with both ranks' timings, and cancelling such a
run stops every rank."""

import psutil
import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from tests.conftest import wait_for
from tests.webapp.runs.factories import make_task
from tests.workers.test_gpu_workers import fake_gpu_workers
from tests.workers.test_run_train import toy_config
from webapp.runs.launch.check import Launch
from webapp.runs.models import Rollout, Run, StepMetric
from webapp.runs.services import run_cancel, run_create
from webapp.scheduling.models import Worker

NEUTRAL = ("a two-process run routed to the worker with two (fake) GPUs, both ranks' timings in one stream, "
           "and a cancel that stops every rank; only the two-GPU worker fits either run, so no two workers "
           "compete for one here: the claim, the cancel's compare-and-set and the ingest are tested on both "
           "backends in tests/workers/test_run_train.py, tests/webapp/scheduling/test_queue.py and "
           "tests/webapp/runs/ingest/test_store.py, concurrent claims by two workers in "
           "tests/workers/test_gpu_workers.py")
pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]

# name -> CUDA_VISIBLE_DEVICES: one worker pinned to one fake GPU, one to two.
FAKE_WORKERS = {"one": "0", "two": "1,2"}


@pytest.fixture
def workers(tmp_path, model_cache_dir, runs_dir, settings, step_gate):
    fakes = {short: {"CUDA_VISIBLE_DEVICES": devices, "COHORT_WORKER_GPU_NAME": "Fake GPU",
                     "COHORT_WORKER_GPU_MEMORY_GB": "24"} for short, devices in FAKE_WORKERS.items()}
    with fake_gpu_workers(tmp_path, model_cache_dir, runs_dir, settings, step_gate, fakes) as started:
        yield started


def ranks_of(run: Run) -> list[psutil.Process]:
    """The rank processes training `run` (their command line names its run directory)."""
    found = []
    for process in psutil.process_iter(["cmdline", "environ"]):
        cmdline, environ = process.info["cmdline"] or [], process.info["environ"] or {}
        if "RANK" in environ and any(arg.endswith(f"/run-{run.pk}") for arg in cmdline):
            found.append(process)
    return found


def test_a_two_process_run_goes_to_the_two_gpu_worker_reports_both_ranks_and_cancels_whole(workers, step_gate, client):
    one, two = workers["one"].hostname, workers["two"].hostname
    assert dict(Worker.objects.values_list("name", "gpu_count")) == {one: 1, two: 2}
    staff = get_user_model().objects.create_user("ann", password="x", is_staff=True)
    task = make_task()
    step_gate.allow(1)
    held = run_create(Launch(owner=staff, task=task, config=toy_config(steps=3, num_processes=2)), name="held")

    running = wait_for(lambda: (r := Run.objects.get(pk=held.pk)).state == Run.State.RUNNING
                       and StepMetric.objects.filter(run=held).exists() and r, 240,
                       "the two-process run to train step 1", workers["two"].log_path)
    assert running.worker == two, "only the worker with two GPUs may take a two-process run"
    ranks = wait_for(lambda: len(r := ranks_of(held)) == 2 and r, 60, "its two rank processes")
    client.force_login(staff)
    html = client.get(reverse("scheduling:queue")).content.decode()
    assert "2 × Fake GPU (24 GB)" in html

    run_cancel(running)
    wait_for(lambda: Run.objects.get(pk=held.pk).state == Run.State.CANCELLED, 120, "the cancel",
             workers["two"].log_path)
    _, alive = psutil.wait_procs(ranks, timeout=60)
    assert alive == [], "cancelling stops every rank"

    step_gate.allow(100)
    config = toy_config(steps=2, num_processes=2)
    finished = run_create(Launch(owner=staff, task=task, config=config), name="whole")
    done = wait_for(lambda: (r := Run.objects.get(pk=finished.pk)).state not in Run.ACTIVE_STATES and r, 300,
                    "the second run to finish", workers["two"].log_path)
    assert (done.state, done.error, done.worker) == (Run.State.SUCCEEDED, "", two)
    metrics = list(StepMetric.objects.filter(run=done).order_by("step"))
    assert [m.step for m in metrics] == [1, 2]  # one stream, not one per rank
    for metric in metrics:
        assert {f"system/rank{r}/{k}" for r in (0, 1) for k in ("sample_s", "update_s")} <= metric.metrics.keys()
        rollouts = Rollout.objects.filter(run=done, step=metric.step)
        assert rollouts.count() == config.examples_per_step * config.rollouts_per_example
