"""Read-side queries for runs. Views and consumers fetch objects only through these scoped getters,
so a stranger's id is a 404 everywhere, never a leak and never a bare `.get(id=)`."""

from django.db.models import QuerySet
from django.http import Http404

from webapp.runs.models import Run, StepMetric


def run_list_for_user(user) -> QuerySet[Run]:
    """Runs the user may see: staff see every run, others their own; anonymous users none."""
    if not user.is_authenticated:
        return Run.objects.none()
    runs = Run.objects.select_related("task", "task__program", "owner")
    return runs if user.is_staff else runs.filter(owner=user)


def run_get_for_user(user, run_id) -> Run:
    """The run with this id if the user may see it; Http404 otherwise (also for a malformed id)."""
    try:
        run_id = int(run_id)
    except (TypeError, ValueError):
        raise Http404("No such run.") from None
    run = run_list_for_user(user).filter(pk=run_id).first()
    if run is None:
        raise Http404("No such run.")
    return run


def step_metrics_after(run: Run, *, after_seq: int, limit: int) -> list[dict]:
    """The stored step metrics of a run with seq > after_seq, oldest first, at most `limit`."""
    rows = (
        StepMetric.objects.filter(run=run, seq__gt=after_seq)
        .order_by("seq")
        .values("seq", "attempt", "step", "metrics")[:limit]
    )
    return list(rows)


def run_list_filtered(user, *, state: str = "", task=None, program=None, owner: str = "", q: str = "") -> QuerySet[Run]:
    """`run_list_for_user` narrowed by the runs list filters (empty values do not filter)."""
    runs = run_list_for_user(user)
    if state:
        runs = runs.filter(state=state)
    if task is not None:
        runs = runs.filter(task=task)
    if program is not None:
        runs = runs.filter(task__program=program)
    if owner:
        runs = runs.filter(owner__username=owner)
    if q:
        runs = runs.filter(name__icontains=q)
    return runs
