"""Claiming the fairest fitting queued run, and staff "move to front"."""

import os
import socket

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from webapp.celery import app as celery_app
from webapp.runs.models import Run
from webapp.runs.services import TRAIN_TASK, run_claim
from webapp.scheduling.models import QueuePriority, Worker
from webapp.scheduling.selectors import queue_order


def run_min_gpu_memory_gb(run: Run) -> float | None:
    """The run's `min_gpu_memory_gb` when its config carries one (older configs do not)."""
    value = (run.config or {}).get("min_gpu_memory_gb")
    return float(value) if value is not None else None


def run_num_processes(run: Run) -> int:
    """How many processes (one per GPU) the run trains on; 1 for configs from before the field."""
    return int((run.config or {}).get("num_processes") or 1)


def _fits(run: Run, gpu_mem_gb: float | None, gpu_count: int = 0) -> bool:
    """Whether a worker with `gpu_count` GPUs of `gpu_mem_gb` each can train `run`: enough memory per
    GPU, and a GPU per process. A worker without GPUs (gpu_count 0) runs the processes on its CPU
    (gloo), as it runs any run on its CPU; min_gpu_memory_gb keeps a run off such workers."""
    need = run_min_gpu_memory_gb(run)
    if need is not None and (gpu_mem_gb is None or gpu_mem_gb < need):
        return False
    return gpu_count == 0 or run_num_processes(run) <= gpu_count


def claim_next(worker_name: str, gpu_mem_gb: float | None = None, gpu_count: int = 0) -> Run | None:
    """Claims the first queued run in fair order that fits this worker's GPUs; None when none fits.

    Rows another worker is claiming right now are skipped (SKIP LOCKED on PostgreSQL), and the claim
    itself goes through run_claim's queued->running compare-and-set, so a run cancelled meanwhile
    is never claimed.
    """
    for _, candidate in queue_order():
        if not _fits(candidate, gpu_mem_gb, gpu_count):
            continue
        with transaction.atomic():
            locked = Run.objects.filter(pk=candidate.pk, state=Run.State.QUEUED)
            if connection.features.has_select_for_update_skip_locked:
                locked = locked.select_for_update(skip_locked=True)
            if not locked.exists():
                continue  # another worker holds it, or it left the queue
            run = run_claim(candidate.pk, worker=worker_name)
        if run is not None:
            QueuePriority.objects.filter(run=run).delete()
            return run
    return None


def queue_move_to_front(run: Run) -> bool:
    """Marks a queued run to be served before every unmarked one; False when it is no longer queued."""
    if run.state != Run.State.QUEUED:
        return False
    QueuePriority.objects.update_or_create(run=run, defaults={"front_at": timezone.now()})
    return True


def local_gpu() -> tuple[str, float | None]:
    """(GPU model, memory in GB) of the first visible device, or ("", None) on a CPU-only host.

    COHORT_WORKER_GPU_NAME / COHORT_WORKER_GPU_MEMORY_GB win over NVML: for a MIG slice, whose
    memory NVML reports for the whole card, and for tests on a machine without a GPU."""
    if settings.COHORT_WORKER_GPU_NAME or settings.COHORT_WORKER_GPU_MEMORY_GB is not None:
        return settings.COHORT_WORKER_GPU_NAME, settings.COHORT_WORKER_GPU_MEMORY_GB
    try:  # nvidia-ml-py is optional at runtime, and a host without a driver raises on init
        import pynvml

        pynvml.nvmlInit()
        try:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
            index = int(visible) if visible.isdigit() else 0
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 1024**3
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 (any NVML failure means "no GPU we can use")
        return "", None
    return (name.decode() if isinstance(name, bytes) else name), round(memory, 1)


def worker_report(name: str, *, host: str | None = None, gpu_name: str | None = None,
                  gpu_memory_gb: float | None = None, devices: str | None = None,
                  gpu_count: int | None = None) -> Worker:
    """Stores (or refreshes) a worker's self-description; GPU fields default to what NVML sees here."""
    if gpu_name is None and gpu_memory_gb is None:
        gpu_name, gpu_memory_gb = local_gpu()
    devices = devices if devices is not None else local_devices()
    if gpu_count is None:
        gpu_count = local_gpu_count(devices) if (gpu_name or gpu_memory_gb is not None) else 0
    worker, _ = Worker.objects.update_or_create(name=name, defaults={
        "host": host if host is not None else socket.gethostname(),
        "gpu_name": gpu_name or "",
        "gpu_memory_gb": gpu_memory_gb,
        "gpu_count": gpu_count,
        "devices": devices,
        "seen_at": timezone.now(),
    })
    return worker


def local_gpu_count(devices: str) -> int:
    """GPUs this worker may use: COHORT_WORKER_GPU_COUNT, else one per device it is pinned to
    (COHORT_WORKER_DEVICES / CUDA_VISIBLE_DEVICES, e.g. "0,1,2,3"), else what NVML counts."""
    if settings.COHORT_WORKER_GPU_COUNT is not None:
        return settings.COHORT_WORKER_GPU_COUNT
    pinned = [d for d in devices.split(",") if d.strip()]
    if pinned:
        return len(pinned)
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 (no driver: a GPU was named by settings, count it as one)
        return 1


def local_devices() -> str:
    """Which GPUs this worker is pinned to, as the queue page shows them: COHORT_WORKER_DEVICES (set
    in docker-compose.yml, where a container sees its one GPU as device 0), else CUDA_VISIBLE_DEVICES."""
    return settings.COHORT_WORKER_DEVICES or os.environ.get("CUDA_VISIBLE_DEVICES", "")


def worker_gpus(name: str) -> tuple[float | None, int]:
    """(memory per GPU in GB, GPU count) as the worker reported them at start; what this host shows
    when it never reported."""
    reported = Worker.objects.filter(name=name).values_list("gpu_memory_gb", "gpu_count").first()
    if reported is not None and reported[0] is not None:
        return reported
    memory = local_gpu()[1]
    return memory, (local_gpu_count(local_devices()) if memory is not None else 0)


def _wake(worker_name: str, reason_run: Run | None = None) -> None:
    """One wake-up message on the worker's own queue (Celery worker_direct): it claims the fairest
    run it fits when it is free, which need not be `reason_run`."""
    from celery.utils.nodenames import worker_direct

    celery_app.send_task(TRAIN_TASK, args=[reason_run.pk if reason_run else None], queue=worker_direct(worker_name))


def wake_worker_that_fits(worker_name: str, gpu_mem_gb: float | None, gpu_count: int = 0) -> str | None:
    """Called when `worker_name` claimed nothing: if the fairest queued run is one its GPU is too small
    for, wakes a worker that reported enough memory (an idle one first). Returns whom it woke.

    Each queued run's own wake-up message may have reached a worker too small for it; without this
    the run would wait until a bigger worker finished its current run. No worker that fits: the run
    stays queued and the queue page says which GPU it waits for."""
    waiting = [run for _, run in queue_order() if not _fits(run, gpu_mem_gb, gpu_count)]
    if not waiting:
        return None
    need = run_min_gpu_memory_gb(waiting[0]) or 0.0
    processes = run_num_processes(waiting[0])
    candidates = list(Worker.objects.filter(gpu_memory_gb__gte=need, gpu_count__gte=processes)
                      .exclude(name=worker_name).order_by("gpu_count", "gpu_memory_gb", "name")
                      .values_list("name", flat=True))
    if not candidates:
        return None
    busy = set(Run.objects.filter(worker__in=candidates, state__in=[Run.State.RUNNING, Run.State.CANCELLING])
               .values_list("worker", flat=True))
    chosen = next((name for name in candidates if name not in busy), candidates[0])
    _wake(chosen, waiting[0])
    return chosen


def wake_self_at_start(worker_name: str, gpu_mem_gb: float | None, gpu_count: int = 0) -> int:
    """A GPU worker that just started sends itself one wake-up per queued run it fits, so runs whose
    messages were consumed by smaller workers before it existed are not left waiting. Extra wake-ups
    cost one query each: they claim nothing."""
    fitting = [run for _, run in queue_order() if _fits(run, gpu_mem_gb, gpu_count)]
    for run in fitting:
        _wake(worker_name, run)
    return len(fitting)
