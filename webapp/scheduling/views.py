"""The queue page: queued runs in the order workers will take them, active runs with their worker
and GPU, the reported workers; owners cancel their queued runs, staff move one to the front."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Max
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from webapp.runs.models import InvalidTransition, Run
from webapp.runs.services import run_cancel
from webapp.scheduling.models import Worker
from webapp.scheduling.present import queued_rows
from webapp.scheduling.selectors import active_runs_with_workers, queue_order, workers_with_runs
from webapp.scheduling.services import queue_move_to_front


@require_GET
def queue_page(request):
    active = active_runs_with_workers()
    largest = Worker.objects.aggregate(memory=Max("gpu_memory_gb"), count=Max("gpu_count"))
    return render(request, "scheduling/queue.html", {
        "queued": queued_rows(queue_order(), request.user, largest["memory"], largest["count"] or 0),
        "active": active,
        "workers": workers_with_runs(active),
    })


def _queued_run(run_id: int) -> Run:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        raise Http404("No such run.")
    return run


@require_POST
def queue_cancel(request, run_id: int):
    run = _queued_run(run_id)
    if not (request.user.is_staff or run.owner_id == request.user.pk):
        # As every scoped getter answers a stranger (DESIGN.md, style 3): no such run of yours.
        raise Http404("No such run.")
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
