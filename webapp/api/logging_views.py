"""The logging API: how a trainer outside Cohort (TRL's GRPOTrainer, a plain PyTorch loop, through the
cohort SDK) streams a run in. Thin views over webapp/runs/ingest/external.py; the bodies are checked by
webapp/api/logging_input.py and described by webapp/api/logging_schema.py.

- `POST /api/external/runs/`: start (or, for a client_id seen before, find) the caller's run: 201 / 200.
- `POST /api/runs/<id>/steps/`: store steps (up to 100 a post, 16 MiB): {"run", "stored", "skipped"}; a
  rollout's bad per-token arrays are left out and the rest stored: 400 naming them, with the same keys.
- `POST /api/runs/<id>/finish/`: succeeded or failed.

Authentication as the rest of the API (a token, or the session with CSRF; a read-only token is a 403).
Only the run's owner logs to it, while at least a member of its project: a run the user (or the token's
project) may not read is a 404; a reader who does not own it, or a viewer, gets a 403.
"""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view, parser_classes, throttle_classes
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from webapp.api import bodies, logging_input, logging_schema, schema, selectors
from webapp.api.budget import LoggingRateThrottle, upload_turn
from webapp.api.parsers import json_parser
from webapp.api.scope import api_run, api_runs, token_default_project, token_project_check
from webapp.projects.models import Role
from webapp.projects.selectors import has_role, projects_for_user
from webapp.runs.ingest.external import (
    ExternalConflict,
    ExternalLimit,
    external_run_finish,
    external_run_start,
    external_steps_log,
)
from webapp.runs.params import BadParam

STEPS_MAX_BODY_BYTES = 16 * 1024 * 1024


@extend_schema(operation_id="external_runs_create", request=logging_schema.ExternalRunCreateSerializer,
               responses=logging_schema.CREATE_RESPONSES)
@api_view(["POST"])
@throttle_classes([LoggingRateThrottle])
def external_run_create(request):
    """`POST /api/external/runs/` with `{"client_id", "task", "name", "config", "tags", "notes", "origin",
    "total_steps"}`: a run of yours trained elsewhere, created running (201, Location: the run in the
    API), or the one this client_id created before (200). Refused (400) at your active-run limit."""
    values = logging_input.create_values(request.data)
    project = _launch_project(request, values.pop("project"))
    try:
        run, created = external_run_start(request.user, project=project, **values)
    except ExternalLimit as refused:
        return Response({"detail": str(refused)}, status=400)
    body = {**bodies.run_dict(selectors.run_get_api(api_runs(request), run.pk)),
            "url": request.build_absolute_uri(reverse("runs:detail", args=[run.pk]))}
    if not created:
        return Response(body)
    return Response(body, status=201, headers={"Location": request.build_absolute_uri(reverse("api:run", args=[run.pk]))})


def _launch_project(request, name: str):
    """The project a run trained elsewhere starts in: the named one (where the user is at least a member,
    within the token's scope), else a scoped token's project, else the user's personal project (None)."""
    if not name:
        return token_default_project(request)
    project = projects_for_user(request.user).filter(name__iexact=name).first()
    if project is None:
        raise BadParam(f"No project {name!r} of yours: see your projects at /projects/.")
    if not has_role(request.user, project.pk, Role.MEMBER):
        raise PermissionDenied(f"You are a viewer of project {project.name}: viewers log no runs there. Ask one of "
                               "its admins to make you a member.")
    token_project_check(request, project)
    return project


def _own_run(request, run_id: int):
    run = api_run(request, run_id)  # 404 for a run the user (or the token's project) may not read
    if run.owner_id != request.user.pk:
        raise PermissionDenied(f"Run {run.pk} is {run.owner.get_username()}'s: only its owner logs to it.")
    if not has_role(request.user, run.project_id, Role.MEMBER):
        raise PermissionDenied(f"You are a viewer of project {run.project.name} now: viewers log nothing there.")
    return run


@upload_turn  # outermost: a post waiting for its turn has not authenticated yet, so it holds no connection
@extend_schema(operation_id="run_steps_log", request=logging_schema.StepsLogSerializer,
               responses=logging_schema.run_responses(logging_schema.StepsLoggedSerializer, (
                   "A run Cohort trains (it takes no logged steps), or a new step of a run that has ended."),
                   bad=logging_schema.STEPS_REFUSED))
@api_view(["POST"])
@parser_classes([json_parser(STEPS_MAX_BODY_BYTES, non_finite=True)])
@throttle_classes([LoggingRateThrottle])
def run_steps_log(request, run_id: int):
    """`POST /api/runs/<id>/steps/` with `{"steps": [{"step", "metrics", "rollouts"}, ...]}`: stores the
    steps not stored yet (idempotent by step number) and answers which were stored and which skipped.

    A refused value is a 400 naming it, and nothing is stored; except a rollout's per-token arrays
    (tokens, logprobs, entropies: issue 45): the bad ones are left out, the rest of the post is stored
    as if they had not been sent, and the 400 names each (`errors`: path -> what is wrong) beside the
    usual `run`, `stored` and `skipped`, so a client can tell a partly stored post from a refused one."""
    run = _own_run(request, run_id)
    steps, refused = logging_input.steps_checked(request.data)
    try:
        result = external_steps_log(run, steps)
    except ExternalConflict as conflict:
        return Response({"detail": str(conflict)}, status=409)
    if refused:
        detail = (f"{logging_input.refused_text(refused)} They were left out; the rest of the post was stored "
                  "(see stored and skipped).")
        return Response({"detail": detail, "errors": {path: [problem] for path, problem in refused.items()},
                         "run": run.pk, **result}, status=400)
    return Response({"run": run.pk, **result})


@extend_schema(operation_id="run_finish", request=logging_schema.RunFinishSerializer,
               responses=logging_schema.run_responses(schema.RunSerializer, (
                   "A run Cohort trains, or one that already ended in the other state.")))
@api_view(["POST"])
@throttle_classes([LoggingRateThrottle])
def run_finish(request, run_id: int):
    """`POST /api/runs/<id>/finish/` with `{"state": "succeeded" | "failed", "error"}`: the run ends; the
    same request again answers the run unchanged."""
    run = _own_run(request, run_id)
    values = logging_input.finish_values(request.data)
    try:
        external_run_finish(run, **values)
    except ExternalConflict as conflict:
        return Response({"detail": str(conflict)}, status=409)
    return Response(bodies.run_dict(selectors.run_get_api(api_runs(request), run.pk)))
