"""The sweep page, its JSON, its Cancel button, and the Studies page: parse input, call a selector or
service, render. Every sweep is read through `sweep_get_for_user` (strangers get the 404 of a sweep
that does not exist; anonymous browsers the login page, from LoginRequiredMiddleware)."""

from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from webapp.sweeps.access import sweep_can_change, sweep_change_check
from webapp.sweeps.page_payload import sweep_payload
from webapp.sweeps.selectors import sweep_get_for_user
from webapp.sweeps.services import sweep_cancel
from webapp.sweeps.studies import studies_for_user


@require_GET
def sweep_detail(request, sweep_id: int):
    sweep = sweep_get_for_user(request.user, sweep_id)
    return render(request, "sweeps/detail.html", _detail_context(request, sweep))


def _detail_context(request, sweep) -> dict:
    payload = sweep_payload(sweep)
    live = {"data_url": reverse("sweeps:data", args=[sweep.pk]), "socket_path": f"/ws/sweeps/{sweep.pk}/"}
    return {"sweep": sweep, "payload": payload, "live": live, "can_change": sweep_can_change(request.user, sweep),
            "compare_url": f"{reverse('runs:compare')}?sweep={sweep.pk}", "space_rows": sorted(sweep.space.items())}


@require_GET
def sweep_data(request, sweep_id: int):
    """What the page draws (webapp/sweeps/page_payload.py), for sweep.js to redraw after a notice."""
    sweep = sweep_get_for_user(request.user, sweep_id)
    return JsonResponse(sweep_payload(sweep))


@require_POST
def sweep_cancel_view(request, sweep_id: int):
    """Stops a running sweep: no further trial, its queued and running runs cancelled. 403 for a reader
    who may not change it, 409 for a sweep that already ended."""
    sweep = sweep_get_for_user(request.user, sweep_id)
    sweep_change_check(request.user, sweep)
    if sweep.state != sweep.State.RUNNING:
        messages.error(request, f"Not possible now: the sweep is already {sweep.state}.")
        return render(request, "sweeps/detail.html", _detail_context(request, sweep), status=409)
    stopped = sweep_cancel(sweep)
    messages.success(request, f"Sweep cancelled: no further trial starts; {stopped} run{'s' if stopped != 1 else ''} "
                              "asked to stop at the next step boundary.")
    return redirect("sweeps:detail", sweep_id=sweep.pk)


@require_GET
def studies(request):
    """Every sweep and experiment the user reads, newest first (webapp/sweeps/studies.py)."""
    rows, more = studies_for_user(request.user)
    return render(request, "sweeps/studies.html", {"studies": rows, "more": more})
