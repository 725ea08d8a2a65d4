"""Claiming the fairest fitting queued run, and staff "move to front"."""

import os
import socket

from django.db import connection, transaction
from django.utils import timezone

from webapp.runs.models import Run
from webapp.runs.services import run_claim
from webapp.scheduling.models import QueuePriority, Worker
from webapp.scheduling.selectors import queue_order


def run_min_gpu_memory_gb(run: Run) -> float | None:
    """The run's `min_gpu_memory_gb` when its config carries one (older configs do not)."""
    value = (run.config or {}).get("min_gpu_memory_gb")
    return float(value) if value is not None else None


def _fits(run: Run, gpu_mem_gb: float | None) -> bool:
    need = run_min_gpu_memory_gb(run)
    return need is None or (gpu_mem_gb is not None and gpu_mem_gb >= need)


def claim_next(worker_name: str, gpu_mem_gb: float | None = None) -> Run | None:
    """Claims the first queued run in fair order that fits this worker's GPU; None when none fits.

    Rows another worker is claiming right now are skipped (SKIP LOCKED on PostgreSQL), and the claim
    itself goes through run_claim's queued->running compare-and-set, so a run cancelled meanwhile
    is never claimed.
    """
    for _, candidate in queue_order():
        if not _fits(candidate, gpu_mem_gb):
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
    """(GPU model, memory in GB) of the first visible device, or ("", None) on a CPU-only host."""
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
                  gpu_memory_gb: float | None = None, devices: str | None = None) -> Worker:
    """Stores (or refreshes) a worker's self-description; GPU fields default to what NVML sees here."""
    if gpu_name is None and gpu_memory_gb is None:
        gpu_name, gpu_memory_gb = local_gpu()
    worker, _ = Worker.objects.update_or_create(name=name, defaults={
        "host": host if host is not None else socket.gethostname(),
        "gpu_name": gpu_name or "",
        "gpu_memory_gb": gpu_memory_gb,
        "devices": devices if devices is not None else os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "seen_at": timezone.now(),
    })
    return worker
