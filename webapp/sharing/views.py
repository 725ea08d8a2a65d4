"""Share link pages: make one (a run's owner or a project admin; a compare view's runs by their members),
list yours with their use counts, revoke one, and open one, which needs no account."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.runs.params import BadParam
from webapp.runs.selectors import run_list_for_user
from webapp.sharing.forms import ShareLinkForm
from webapp.sharing.models import ShareLink
from webapp.sharing.services import (
    MAX_RUNS,
    session_remember,
    share_link_create,
    share_link_open,
    share_link_revoke,
    share_links_for_user,
    share_refusal,
)

MAX_METRICS = 12


def _chosen_runs(request, data) -> tuple[list, list[str]]:
    """The runs (`runs=`) and metrics (`metrics=`) to share; BadParam for malformed ones, Http404 for a
    run the user does not read."""
    try:
        ids = list(dict.fromkeys(int(i) for i in data.getlist("runs")))
    except ValueError:
        raise BadParam("'runs' must be run ids.") from None
    if not 1 <= len(ids) <= MAX_RUNS:
        raise BadParam(f"Choose 1 to {MAX_RUNS} runs to share.")
    metrics = [m[:200] for m in data.getlist("metrics") if m][:MAX_METRICS]
    runs = list(run_list_for_user(request.user).filter(pk__in=ids))
    if len(runs) != len(ids):
        raise Http404("No such run.")
    runs.sort(key=lambda r: ids.index(r.pk))
    return runs, metrics


@require_http_methods(["GET", "POST"])
def share_new(request):
    """`/share/new?runs=1[&runs=2&metrics=reward/mean]`: the form (GET), the link made (POST)."""
    # The form posts its runs; a POST to the page's address (?runs=...) names them there.
    data = request.POST if "runs" in request.POST else request.GET
    try:
        runs, metrics = _chosen_runs(request, data)
    except BadParam as exc:
        return render(request, "runs/bad_request.html", {"message": str(exc)}, status=400)
    refused = share_refusal(request.user, runs)
    if refused:
        raise PermissionDenied(refused)
    form = ShareLinkForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        link = share_link_create(creator=request.user, runs=runs, metrics=metrics, **form.cleaned_data)
        messages.success(request, "Share link made: copy it below. It is listed under Share links, where you can "
                                  "revoke it.")
        return redirect(f"{reverse('sharing:list')}?made={link.pk}")
    return render(request, "sharing/new.html", {"form": form, "runs": runs, "metrics": metrics},
                  status=400 if request.method == "POST" else 200)


@require_GET
def share_list(request):
    """The user's links: what each opens, whether anonymous, when it expires, how often it was used."""
    links = list(share_links_for_user(request.user))
    made = request.GET.get("made", "")
    for link in links:
        link.url = request.build_absolute_uri(reverse("sharing:open", args=[link.token]))
    return render(request, "sharing/list.html", {"links": links, "made": int(made) if made.isdigit() else None})


@require_POST
def share_revoke(request, link_id: int):
    link = share_link_revoke(user=request.user, link_id=link_id)
    messages.success(request, f"{link} is revoked: it opens nothing from now on.")
    return redirect("sharing:list")


@login_not_required
@require_GET
def share_open(request, token: str):
    """`/share/<token>/`: no login. A valid link is remembered by this browser and opens its run (or its
    compare view); any other token is the same 404, whether its run exists or not."""
    link = share_link_open(token)
    session_remember(request.session, link)
    run_ids = list(link.runs.order_by("pk").values_list("pk", flat=True))
    if link.view == ShareLink.View.RUN and len(run_ids) == 1:
        return redirect("runs:detail", run_id=run_ids[0])
    query = urlencode([("runs", i) for i in run_ids] + [("metrics", m) for m in link.metrics])
    return redirect(f"{reverse('runs:compare')}?{query}")
