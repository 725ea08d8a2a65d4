"""Two real Celery workers on the `gpu` queue, pinned to fake devices 0 and 1 with fake GPUs of 24
and 80 GB: each trains one run at a time, a run asking for 40 GB only ever runs on the 80 GB one,
and the queue page shows which worker (host, GPU, device) runs what."""

from contextlib import ExitStack, contextmanager

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from tests.conftest import celery_worker, service_env, wait_for
from tests.webapp.runs.factories import make_task
from tests.workers.test_run_train import toy_config
from trainer.run.gate import GATE_ENV
from webapp.celery import app
from webapp.runs.launch.check import Launch
from webapp.runs.models import Run
from webapp.runs.services import run_create
from webapp.scheduling.models import Worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FAKE_GPUS = {"gpu0": ("0", "Fake GPU 24G", "24"), "gpu1": ("1", "Fake GPU 80G", "80")}


@contextmanager
def fake_gpu_workers(tmp_path, model_cache_dir, runs_dir, settings, step_gate, fakes: dict[str, dict[str, str]]):
    """{name: process}: real workers on the gpu queue only, one per entry of `fakes` (name -> the
    variables that fake its GPUs: CUDA_VISIBLE_DEVICES, COHORT_WORKER_GPU_NAME, ...), each reported in."""
    settings.COHORT_RUNS_DIR = runs_dir
    app.control.purge()
    with ExitStack() as stack:
        workers = {}
        for short, fake in fakes.items():
            env = service_env(COHORT_RUNS_DIR=str(runs_dir), COHORT_MODEL_CACHE=str(model_cache_dir),
                              **fake, **{GATE_ENV: str(step_gate.path)})
            workers[short] = stack.enter_context(
                celery_worker(tmp_path / f"{short}.log", env, app=app, queues="gpu", name=short))
        names = {w.hostname for w in workers.values()}
        first = next(iter(workers.values()))
        wait_for(lambda: set(Worker.objects.values_list("name", flat=True)) >= names, 60,
                 "the workers to report their GPUs", first.log_path)
        yield workers


@pytest.fixture
def gpu_workers(tmp_path, model_cache_dir, runs_dir, settings, step_gate):
    """{"gpu0": process, "gpu1": process}, each reporting its fake GPU."""
    fakes = {short: {"CUDA_VISIBLE_DEVICES": device, "COHORT_WORKER_GPU_NAME": name, "COHORT_WORKER_GPU_MEMORY_GB": memory}
             for short, (device, name, memory) in FAKE_GPUS.items()}
    with fake_gpu_workers(tmp_path, model_cache_dir, runs_dir, settings, step_gate, fakes) as workers:
        yield workers


def _logs(workers) -> str:
    return "\n".join(f"--- {name}\n{w.log_path.read_text()}" for name, w in workers.items())


def test_each_worker_trains_one_run_at_a_time_and_the_queue_page_says_which(gpu_workers, step_gate, client):
    make_user = get_user_model().objects.create_user
    ann, bob = make_user("ann", password="x"), make_user("bob", password="x", is_staff=True)
    gpu0, gpu1 = gpu_workers["gpu0"].hostname, gpu_workers["gpu1"].hostname
    reported = {w.name: w for w in Worker.objects.all()}
    assert (reported[gpu0].gpu_name, reported[gpu0].gpu_memory_gb, reported[gpu0].devices) == ("Fake GPU 24G", 24.0, "0")
    assert (reported[gpu1].gpu_name, reported[gpu1].gpu_memory_gb, reported[gpu1].devices) == ("Fake GPU 80G", 80.0, "1")

    step_gate.allow(1)  # every run trains step 1, then waits for the test
    task = make_task()
    small = [run_create(Launch(owner=ann, task=task, config=toy_config(steps=2)), name=f"small-{i}") for i in range(2)]
    big = run_create(Launch(owner=bob, task=task, config=toy_config(steps=2, min_gpu_memory_gb=40)), name="big")
    runs = [*small, big]

    def running():
        return list(Run.objects.filter(pk__in=[r.pk for r in runs], state=Run.State.RUNNING))

    active = wait_for(lambda: (r := running()) and len(r) == 2 and r, 240, "two runs to start", gpu_workers["gpu1"].log_path)
    assert {r.worker for r in active} == {gpu0, gpu1}, "each worker takes exactly one run"
    assert all(r.worker == gpu1 for r in active if r.pk == big.pk), "the 40 GB run is never on the 24 GB GPU"
    waiting = Run.objects.get(pk=({r.pk for r in runs} - {r.pk for r in active}).pop())
    assert waiting.state == Run.State.QUEUED

    client.force_login(bob)
    html = client.get(reverse("scheduling:queue")).content.decode()
    for run in active:
        assert f'data-run="{run.pk}" data-worker="{run.worker}"' in html
    assert "Fake GPU 24G (24 GB) · device 0" in html and "Fake GPU 80G (80 GB) · device 1" in html
    assert f'data-run="{waiting.pk}" data-position="1"' in html

    step_gate.allow(100)
    for run in runs:
        wait_for(lambda run=run: Run.objects.get(pk=run.pk).state not in Run.ACTIVE_STATES, 300,
                 f"run {run.pk} to finish\n{_logs(gpu_workers)}")
    done = {r.pk: r for r in Run.objects.filter(pk__in=[r.pk for r in runs])}
    assert all(r.state == Run.State.SUCCEEDED for r in done.values()), [(r.pk, r.state, r.error) for r in done.values()]
    assert done[big.pk].worker == gpu1
    # one at a time per worker: the runs each worker trained do not overlap in time
    for name in (gpu0, gpu1):
        spans = sorted((r.started_at, r.finished_at) for r in done.values() if r.worker == name)
        assert all(earlier[1] <= later[0] for earlier, later in zip(spans, spans[1:], strict=False)), spans
