"""The replay pages: the confirm page of one call (GET shows the cost, POST starts the replay) and the
call's replays beside the original. Thin: parse, check, call a service or selector, render."""

from __future__ import annotations

from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from webapp.runs.access import anonymized, link_readable, run_read
from webapp.runs.replay import selectors
from webapp.runs.replay.services import (
    DEFAULT_GROUP_SIZE,
    MAX_GROUP_SIZE,
    group_size_error,
    replay_plan,
    replay_request,
    rollout_calls,
)


@require_http_methods(["GET", "POST"])
def replay_start(request, run_id: int, call_id: int):
    """GET: what replaying this call would cost (generations, model, adapter, time), or why it cannot run.
    POST: starts it (a member or admin of the run's project; a viewer gets a 403) and shows its page."""
    run = run_read(request, run_id)
    call = selectors.replay_call_get(run, call_id)
    selectors.replay_start_check(run)
    raw = request.POST.get("group_size") if request.method == "POST" else request.GET.get("g")
    group_size, error = group_size_error(raw)
    context = {"run": run, "call": call, "rollout": call.rollout, "g_max": MAX_GROUP_SIZE, "g_default": DEFAULT_GROUP_SIZE}
    if error:
        return render(request, "runs/replay_confirm.html", {**context, "error": error, "group_size": raw}, status=400)
    plan = replay_plan(run, call, group_size, request.user)
    context.update(plan=plan, group_size=group_size)
    if request.method == "GET":
        return render(request, "runs/replay_confirm.html", context)
    if plan.refusal:  # the page says why; nothing was queued
        return render(request, "runs/replay_confirm.html", context, status=409)
    replay = replay_request(plan, request.user)
    return redirect(reverse("runs:call_replays", args=[run.pk, call.pk]) + f"#replay-{replay.pk}")


@require_GET
@link_readable
def call_replays(request, run_id: int, call_id: int):
    """The replays of one call beside the original: each one's G alternatives with their later calls'
    completions, reward components and total, and the spread of the G rewards. It refreshes itself
    while one is queued or running."""
    run = run_read(request, run_id)
    call = selectors.replay_call_get(run, call_id)
    replays = selectors.call_replays(run, call.pk)
    original = [c for c in rollout_calls(call.rollout) if c.position >= call.position]
    hide = (lambda text: anonymized(text, run)) if run.access.anonymous else (lambda text: text)
    for c in original:
        c.completion = hide(c.completion)
    for replay in replays:
        for alternative in (replay.result or {}).get("alternatives", []):
            for alt_call in alternative.get("calls", []):
                alt_call["completion"] = hide(alt_call.get("completion"))
    return render(request, "runs/replays.html", {
        "run": run, "call": call, "rollout": call.rollout, "original": original, "replays": replays,
        "pending": any(not r.done for r in replays), "can_start": selectors.replay_allowed(run),
    })
