"""The queue's order, computed from the database (not from Celery's message order)."""

from django.db.models import Max

from webapp.runs.models import Run
from webapp.scheduling.models import Worker


def _fair_order(runs: list[Run]) -> list[Run]:
    """Front-marked runs first (newest mark first), then round-robin over owners.

    Each owner's runs keep their FIFO order; owners are ordered by who was served least recently
    (never served first), ties broken by their oldest queued run.
    """
    fronted = sorted((r for r in runs if getattr(r, "front_at", None)), key=lambda r: (-r.front_at.timestamp(), r.pk))
    rest = [r for r in runs if not getattr(r, "front_at", None)]
    per_owner: dict[int, list[Run]] = {}
    for run in sorted(rest, key=lambda r: (r.created_at, r.pk)):
        per_owner.setdefault(run.owner_id, []).append(run)
    served = dict(
        Run.objects.filter(owner_id__in=per_owner, started_at__isnull=False)
        .values("owner_id").annotate(last=Max("started_at")).values_list("owner_id", "last")
    )

    def owner_key(owner_id: int):
        last = served.get(owner_id)
        first = per_owner[owner_id][0]
        return (last is not None, last.timestamp() if last else 0.0, first.created_at, first.pk)

    owners = sorted(per_owner, key=owner_key)
    ordered = list(fronted)
    for depth in range(max((len(v) for v in per_owner.values()), default=0)):
        ordered.extend(per_owner[o][depth] for o in owners if depth < len(per_owner[o]))
    return ordered


def queued_runs():
    """Queued runs with their owner and front mark (one query); not those placed on Slurm, whose jobs wait
    in Slurm's own queue (slurm/selectors.py)."""
    return (Run.objects.filter(state=Run.State.QUEUED, partition="").select_related("owner", "task", "project", "queue_priority")
            .order_by("created_at", "pk"))


def queue_order() -> list[tuple[int, Run]]:
    """[(1-based position, run)] for every queued run, fairest first."""
    runs = list(queued_runs())
    for run in runs:
        # hasattr: the reverse one-to-one raises when the run has no mark.
        priority = run.queue_priority if hasattr(run, "queue_priority") else None
        run.front_at = priority.front_at if priority else None
    return list(enumerate(_fair_order(runs), start=1))


def active_runs_with_workers() -> list[Run]:
    """Running and cancelling runs, each with `.worker_row` (the Worker it runs on, or None): two queries.
    Runs trained elsewhere (webapp/runs/ingest/external.py) are left out: they hold none of these workers."""
    from webapp.scheduling.models import Worker

    runs = list(Run.objects.filter(state__in=[Run.State.RUNNING, Run.State.CANCELLING], origin=Run.ORIGIN_COHORT,
                                   partition="")
                .select_related("owner", "task").order_by("started_at", "pk"))
    workers = {w.name: w for w in Worker.objects.filter(name__in={r.worker for r in runs})}
    for run in runs:
        run.worker_row = workers.get(run.worker)
    return runs


def workers_with_runs(active: list[Run]) -> list:
    """Every reported worker, newest report first, each with `.runs` (its active runs from `active`)."""
    from webapp.scheduling.models import Worker

    by_worker: dict[str, list[Run]] = {}
    for run in active:
        by_worker.setdefault(run.worker, []).append(run)
    workers = list(Worker.objects.order_by("name"))
    for worker in workers:
        worker.runs = by_worker.get(worker.name, [])
    return workers


def most_gpus_per_worker() -> int:
    """The most GPUs one worker that reported in may use (0: none has, or only CPU workers): the most a
    run can be given, as each worker reports itself when it starts (services.worker_report)."""
    return Worker.objects.aggregate(most=Max("gpu_count"))["most"] or 0
