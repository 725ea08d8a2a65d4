"""The Where choice of every launch door: which partitions are offered (the admin's
COHORT_SLURM_PARTITIONS that Slurm reports), what each has as `sinfo` tells it, and the check of a run's
placement against Slurm's own figures: a partition not offered, more GPUs than it holds, a time over its
limit or the server's. Registered as the launch check's placement (webapp/runs/hooks.py).

sinfo's answer is kept for a few seconds: a busy launch form must not start a subprocess per view. When
Slurm does not answer, the offered names still stand (the run waits, queued, with the reason until it
answers) and only the server's own time limit is checked.
"""

from __future__ import annotations

import threading
import time

from django.conf import settings

from webapp.scheduling.slurm import tools

CACHE_S = 5.0
_cache: dict[str, tuple[float, object]] = {}
_lock = threading.Lock()


def cluster_partitions() -> dict[str, tools.Partition] | str:
    """sinfo's partitions, or the reason Slurm did not answer (a string)."""
    with _lock:
        cached = _cache.get("partitions")
        if cached and time.monotonic() - cached[0] < CACHE_S:
            return cached[1]  # type: ignore[return-value]
    try:
        answer: dict[str, tools.Partition] | str = tools.partitions()
    except (tools.SlurmUnreachable, tools.SlurmRefused) as exc:
        answer = f"Slurm did not answer: {exc}"
    with _lock:
        _cache["partitions"] = (time.monotonic(), answer)
    return answer


def forget_partitions() -> None:
    """Read sinfo again at the next question (tests, after changing the cluster)."""
    with _lock:
        _cache.clear()


def describe(partition: tools.Partition) -> str:
    """"gpu: gpu:2 per node, 1 of 1 nodes free, 30 min": what the Where choice shows of a partition."""
    gpus = f"{partition.gres} per node" if partition.gpus_per_node else "no GPUs"
    if not partition.up:
        return f"{partition.name}: {gpus}, down (Slurm starts no job there now), {partition.time_label}"
    return (f"{partition.name}: {gpus}, {partition.idle_nodes} of {partition.nodes} "
            f"node{'s' if partition.nodes != 1 else ''} free, {partition.time_label}")


def offered() -> list[tuple[str, str]]:
    """[(name, label)] of the partitions the admin offers, with sinfo's figures where it answered."""
    names = list(settings.COHORT_SLURM_PARTITIONS)
    found = cluster_partitions()
    if isinstance(found, str):
        return [(name, f"{name} (Slurm does not answer now)") for name in names]
    return [(name, describe(found[name])) for name in names if name in found]


def time_limit_max(partition: tools.Partition | None) -> int:
    limit = settings.COHORT_SLURM_MAX_TIME_MIN
    if partition is not None and partition.time_limit_min is not None:
        limit = min(limit, partition.time_limit_min)
    return limit


def check(partition_name: str, time_limit_min: int | None, processes: int) -> tuple[int | None, dict[str, list[str]]]:
    """(The run's time limit in minutes, errors by field) for a run of `processes` processes."""
    names = list(settings.COHORT_SLURM_PARTITIONS)
    if partition_name not in names:
        offer = ", ".join(names) if names else "none: Slurm is not configured on this server"
        return None, {"partition": [f"Partition {partition_name!r} is not offered here (offered: {offer})."]}
    found = cluster_partitions()
    partition = None
    errors: dict[str, list[str]] = {}
    if isinstance(found, dict):
        partition = found.get(partition_name)
        if partition is None:
            return None, {"partition": [f"Slurm reports no partition {partition_name!r} (sinfo lists "
                                        f"{', '.join(sorted(found)) or 'none'})."]}
        if partition.gpus_per_node and processes > partition.gpus:
            errors["partition"] = [f"The run needs {processes} GPUs (one per process, num_processes), and partition "
                                   f"{partition_name} has {partition.gres} per node on {partition.nodes} "
                                   f"node{'s' if partition.nodes != 1 else ''}: {partition.gpus} GPUs at most."]
    most = time_limit_max(partition)
    # Left empty: the server's default, within the partition's limit (a short partition gets its limit).
    minutes = time_limit_min if time_limit_min is not None else min(settings.COHORT_SLURM_DEFAULT_TIME_MIN, most)
    if minutes < 1:
        errors["time_limit"] = ["A time limit is at least 1 minute."]
    elif minutes > most:
        whose = (f"partition {partition_name}'s limit (sinfo)" if partition is not None and partition.time_limit_min
                 is not None and partition.time_limit_min <= settings.COHORT_SLURM_MAX_TIME_MIN
                 else "this server's limit (COHORT_SLURM_MAX_TIME_MIN)")
        errors["time_limit"] = [f"{minutes} minutes is over {whose} of {most} minutes."]
    return min(minutes, most) if not errors else None, errors
