"""What the pages show of Slurm: the run page's job panel (its state and reason in Slurm's words, its
nodes, the batch script) and the queue page's Slurm section (every run placed on a partition that has
not ended)."""

from __future__ import annotations

from webapp.runs.models import Run
from webapp.scheduling.models import SlurmJob


def runs_slurm_context(runs: list) -> dict:
    """The run page's `slurm_job` (one run on a partition; None otherwise, and on the compare page)."""
    if len(runs) != 1 or not runs[0].partition:
        return {"slurm_job": None}
    run = runs[0]
    job = SlurmJob.objects.filter(run=run).first() or SlurmJob(run=run)
    return {"slurm_job": job}


def slurm_queue(project=None) -> list[Run]:
    """Active runs placed on Slurm, oldest first, each with `.slurm` (its job row, or an unsaved one before
    the tick first saw it)."""
    runs = (Run.objects.filter(partition__gt="", state__in=Run.ACTIVE_STATES)
            .select_related("owner", "task", "project").order_by("created_at", "pk"))
    if project is not None:
        runs = runs.filter(project=project)
    runs = list(runs)
    jobs = {job.run_id: job for job in SlurmJob.objects.filter(run__in=runs)}
    for run in runs:
        run.slurm = jobs.get(run.pk) or SlurmJob(run=run)
    return runs
