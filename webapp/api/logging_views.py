"""The logging API: how a trainer outside Cohort (TRL's GRPOTrainer, a plain PyTorch loop, through the
cohort SDK) streams a run in. Thin views over webapp/runs/external.py; the bodies are checked by
webapp/api/logging_input.py and described by webapp/api/logging_schema.py.

- `POST /api/external/runs/`: start (or, for a client_id seen before, find) the caller's run: 201 / 200.
- `POST /api/runs/<id>/steps/`: store steps (up to 100 a post, 16 MiB): {"run", "stored", "skipped"}.
- `POST /api/runs/<id>/finish/`: succeeded or failed.

Authentication as the rest of the API (a token, or the session with CSRF). Only the run's owner logs to
it: a run the user may not see is a 404, staff who see it but do not own it get a 403.
"""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view, parser_classes
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from webapp.api import logging_input, logging_schema, present, schema, selectors
from webapp.api.parsers import json_parser
from webapp.runs.external import (
    ExternalConflict,
    ExternalLimit,
    external_run_finish,
    external_run_start,
    external_steps_log,
)
from webapp.runs.selectors import run_get_for_user

STEPS_MAX_BODY_BYTES = 16 * 1024 * 1024


@extend_schema(operation_id="external_runs_create", request=logging_schema.ExternalRunCreateSerializer,
               responses=logging_schema.CREATE_RESPONSES)
@api_view(["POST"])
def external_run_create(request):
    """`POST /api/external/runs/` with `{"client_id", "task", "name", "config", "tags", "notes", "origin",
    "total_steps"}`: a run of yours trained elsewhere, created running (201, Location: the run in the
    API), or the one this client_id created before (200). Refused (400) at your active-run limit."""
    values = logging_input.create_values(request.data)
    try:
        run, created = external_run_start(request.user, **values)
    except ExternalLimit as refused:
        return Response({"detail": str(refused)}, status=400)
    body = {**present.run_dict(selectors.run_get_api(request.user, run.pk)),
            "url": request.build_absolute_uri(reverse("runs:detail", args=[run.pk]))}
    if not created:
        return Response(body)
    return Response(body, status=201, headers={"Location": request.build_absolute_uri(reverse("api:run", args=[run.pk]))})


def _own_run(request, run_id: int):
    run = run_get_for_user(request.user, run_id)  # 404 for a run the user may not see
    if run.owner_id != request.user.pk:
        raise PermissionDenied(f"Run {run.pk} is {run.owner.get_username()}'s: only its owner logs to it.")
    return run


@extend_schema(operation_id="run_steps_log", request=logging_schema.StepsLogSerializer,
               responses=logging_schema.run_responses(logging_schema.StepsLoggedSerializer, (
                   "A run Cohort trains (it takes no logged steps), or a new step of a run that has ended.")))
@api_view(["POST"])
@parser_classes([json_parser(STEPS_MAX_BODY_BYTES)])
def run_steps_log(request, run_id: int):
    """`POST /api/runs/<id>/steps/` with `{"steps": [{"step", "metrics", "rollouts"}, ...]}`: stores the
    steps not stored yet (idempotent by step number) and answers which were stored and which skipped."""
    run = _own_run(request, run_id)
    steps = logging_input.steps_values(request.data)
    try:
        result = external_steps_log(run, steps)
    except ExternalConflict as conflict:
        return Response({"detail": str(conflict)}, status=409)
    return Response({"run": run.pk, **result})


@extend_schema(operation_id="run_finish", request=logging_schema.RunFinishSerializer,
               responses=logging_schema.run_responses(schema.RunSerializer, (
                   "A run Cohort trains, or one that already ended in the other state.")))
@api_view(["POST"])
def run_finish(request, run_id: int):
    """`POST /api/runs/<id>/finish/` with `{"state": "succeeded" | "failed", "error"}`: the run ends; the
    same request again answers the run unchanged."""
    run = _own_run(request, run_id)
    values = logging_input.finish_values(request.data)
    try:
        external_run_finish(run, **values)
    except ExternalConflict as conflict:
        return Response({"detail": str(conflict)}, status=409)
    return Response(present.run_dict(selectors.run_get_api(request.user, run.pk)))
