"""`POST /api/runs/<id>/events/`: a Slurm job posts its trainer's event-log lines (cohort/slurm_job.py).

Authenticated by the job's token alone (`Authorization: Bearer`), which posts this one run's events and
is revoked when the run ends: the compute node holds no user's token, no session and no database.
Answers {"stored": steps stored now, "state": the run's state}; the job reads `cancelling` as the
request to stop. A bad body is a 400 naming the line; a token that is not this run's a 401.
"""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_not_required
from django.db import transaction
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from trainer.run import events as contract
from webapp.runs.ingest.trainer_events import trainer_events_record
from webapp.runs.services import run_heartbeat
from webapp.scheduling.slurm.services import FINAL, job_for_token, job_statuses_apply, token_revoke

MOST_EVENTS_A_POST = 5000
EVENT_TYPES = frozenset({"status", "step", "prompts", "tokens"})


class BadEvents(Exception):
    pass


def _bearer(request) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    return key.strip() if scheme.lower() == "bearer" else ""


def events_checked(body: bytes) -> list[dict]:
    """The posted lines, each an event of the trainer's log with its attempt and step in bounds."""
    try:
        data = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadEvents(f"The body is not JSON: {exc}.") from None
    events = data.get("events") if isinstance(data, dict) else None
    if not isinstance(events, list) or not 1 <= len(events) <= MOST_EVENTS_A_POST:
        raise BadEvents(f'The body is {{"events": [...]}} with 1 to {MOST_EVENTS_A_POST} event-log lines.')
    for index, event in enumerate(events):
        if not isinstance(event, dict) or event.get("type") not in EVENT_TYPES:
            raise BadEvents(f"events[{index}] is not an event of the trainer's log (a type of "
                            f"{', '.join(sorted(EVENT_TYPES))}).")
        # A step names its attempt, and so does the status that starts one; a final status may not.
        needs_attempt = event["type"] == "step" or (event["type"] == "status" and event.get("state") == "running")
        if needs_attempt and "attempt" not in event:
            raise BadEvents(f"events[{index}] starts or belongs to an attempt and must name it ('attempt').")
        for key in ("attempt", "step"):
            value = event.get(key, 1 if key == "attempt" else 0)
            if isinstance(value, bool) or not isinstance(value, int) or not contract.step_in_bounds(value):
                raise BadEvents(f"events[{index}].{key} must be a whole number in bounds, not {value!r}.")
        if event["type"] == "step" and not isinstance(event.get("metrics", {}), dict):
            raise BadEvents(f"events[{index}].metrics must be an object of metric name -> number.")
    return events


@login_not_required  # the job token is its authentication; no session, no user
@csrf_exempt
@require_POST
def job_events(request, run_id: int):
    job = job_for_token(run_id, _bearer(request))
    if job is None:
        return JsonResponse({"detail": "This token posts no events for this run: it is not the run's job token, "
                                       "or the run ended and its token was revoked."}, status=401)
    try:
        events = events_checked(request.body)
    except BadEvents as exc:
        return JsonResponse({"detail": str(exc)}, status=400)
    run = job.run
    if run.state in FINAL:
        token_revoke(job)
        return JsonResponse({"stored": 0, "state": run.state})
    try:
        with transaction.atomic():
            stored = trainer_events_record(run, events)
    except (KeyError, TypeError, ValueError) as exc:  # a line the ingest cannot read: nothing of the post stays
        return JsonResponse({"detail": f"An event could not be stored ({exc.__class__.__name__}: {exc}); "
                                       "nothing of this post was stored."}, status=400)
    # A final status and the token's revocation commit together: nobody sees the run ended with a live token.
    with transaction.atomic():
        job_statuses_apply(run, events)
        run.refresh_from_db()
        if run.state in FINAL:
            token_revoke(job)
    run_heartbeat(run.pk)  # the job's post is its heartbeat
    return JsonResponse({"stored": len(stored), "state": run.state})
