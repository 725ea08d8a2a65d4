"""The queue page: queued runs in the order workers will take them, active runs with their worker
and GPU, the reported workers; owners cancel their queued runs, staff move one to the front."""

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Max
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from webapp.projects.selectors import project_get_for_user, projects_for_user
from webapp.runs.access import run_change_check
from webapp.runs.models import InvalidTransition, Run
from webapp.runs.selectors import run_get_for_user
from webapp.runs.services import run_cancel
from webapp.scheduling.models import Worker
from webapp.scheduling.queue_rows import mark_readable, queued_rows
from webapp.scheduling.selectors import active_runs_with_workers, queue_order, workers_with_runs
from webapp.scheduling.services import queue_move_to_front
from webapp.scheduling.slurm.selectors import slurm_queue


@require_GET
def queue_page(request):
    """The lab's queue. `?project=NAME` (a project the user reads) narrows the queued and running runs to it."""
    name = request.GET.get("project", "")[:150]
    project = project_get_for_user(request.user, name) if name else None
    active = mark_readable(active_runs_with_workers(), request.user)
    largest = Worker.objects.aggregate(memory=Max("gpu_memory_gb"), count=Max("gpu_count"))
    order = queue_order()
    if project is not None:
        order = [(position, run) for position, run in order if run.project_id == project.pk]
    return render(request, "scheduling/queue.html", {
        "queued": queued_rows(order, request.user, largest["memory"], largest["count"] or 0),
        "active": [run for run in active if project is None or run.project_id == project.pk],
        "workers": workers_with_runs(active),
        "projects": projects_for_user(request.user), "project": project,
        "slurm_runs": mark_readable(slurm_queue(project), request.user),
        "slurm_offered": bool(settings.COHORT_SLURM_PARTITIONS),
    })


def _queued_run(run_id: int) -> Run:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        raise Http404("No such run.")
    return run


@require_POST
def queue_cancel(request, run_id: int):
    # As every scoped getter answers a stranger (docs/explanation/architecture.md, style 3): a run of another project is absent;
    # a reader who may not change it (a viewer, a member and another's run) gets a 403 with the reason.
    run = run_get_for_user(request.user, run_id)
    run_change_check(request.user, run)
    try:
        run_cancel(run)
    except InvalidTransition as exc:
        messages.error(request, f"Not possible now: {exc}")
        return redirect("scheduling:queue")
    messages.success(request, f"Run {run.pk} cancelled." if run.state == Run.State.CANCELLED
                     else f"Run {run.pk} will stop at its next step boundary.")
    return redirect("scheduling:queue")


@require_POST
def queue_front(request, run_id: int):
    if not request.user.is_staff:
        raise PermissionDenied("Only staff can reorder the queue.")
    run = _queued_run(run_id)
    if queue_move_to_front(run):
        messages.success(request, f"Run {run.pk} moved to the front of the queue.")
    else:
        messages.error(request, f"Run {run.pk} is no longer queued ({run.state}).")
    return redirect("scheduling:queue")
