"""Sweeps through the API (issue 44): `POST /api/sweeps/` launches one from the run-creation body plus a
`sweep` object, checked as the launch form's Sweep button checks it; `GET /api/sweeps/<id>/` reads one
with its trials. Authentication and scopes are the runs API's: a read-only token is refused the POST
(403, before this runs), a token scoped to a project launches and reads there only, and a sweep the
user may not read is a 404 (`sweep_get_for_user`)."""

from __future__ import annotations

from django.http import Http404
from django.urls import reverse
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

from trainer.run.events import finite_or_none
from webapp.api import schema, sweep_schema
from webapp.api.launch_body import launch_body, launch_from_body, refused_response
from webapp.api.scope import token_default_project, token_of, token_project_check
from webapp.nul_guard import holds_nul
from webapp.runs.launch.check import LaunchRefused
from webapp.runs.params import BadParam
from webapp.sweeps.models import Sweep
from webapp.sweeps.plan import SweepRefused
from webapp.sweeps.selectors import sweep_get_for_user
from webapp.sweeps.services import sweep_create
from webapp.sweeps.spec_input import spec_from_mapping

NON_FIELD = "sweep"  # the errors key of what is wrong with the sweep as a whole
# The base's JSON types as its schema documents them (a bool is no int, nor a string a number).
BASE_TYPES = {"task": (str, "a task's name"), "project": (str, "a project's name"), "program": (str, "a string"),
              "name": (str, "a string"), "notes": (str, "a string"), "preset": ((str, type(None)), "a string or null"),
              "config": (dict, "an object"), "program_state": ((dict, type(None)), "an object or null"),
              "tags": (list, "a list of strings"), "partition": (str, "a partition's name"),
              "time_limit": ((int, type(None)), "a whole number of minutes or null")}


@extend_schema(operation_id="sweeps_create", request=sweep_schema.SweepCreateSerializer,
               responses=schema.create_responses(sweep_schema.SweepSerializer),
               examples=[OpenApiExample("TPE over the toy task's learning rate and group size", request_only=True,
                                        value=sweep_schema.EXAMPLE)])
@api_view(["POST"])
def sweep_list(request):
    """`POST /api/sweeps/` with the body of `POST /api/runs/` (the base settings) and `"sweep": {"space":
    {...}, "method", "seeds", "n_trials", "parallel", "objective", "mode", "direction", "pruner",
    "sampler_seed", "options"}`: creates the sweep and queues its first configurations (201 with the
    sweep and its trials; 400 with `errors`, field -> messages, and nothing queued)."""
    body = request.data
    if not isinstance(body, dict) or "sweep" not in body:
        raise BadParam('The body is a run\'s (as for POST /api/runs/) with a "sweep" object, e.g. {"task": "toy", '
                       '"sweep": {"space": {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": true}}}}.')
    if holds_nul(body):  # PostgreSQL text and jsonb cannot store it
        raise BadParam("The body holds a NUL character (\\u0000), which no field accepts.")
    base = {key: value for key, value in body.items() if key != "sweep"}
    try:
        _check_documented(base)
        asked = launch_body(request.user, base)
        project = asked.project or token_default_project(request)
        token_project_check(request, project)
        launch = launch_from_body(request.user, asked, project=project)  # the base, checked as a run's
        spec = spec_from_mapping(body["sweep"])
    except LaunchRefused as refused:
        answer = refused_response(refused)
        answer.data["detail"] = f"The sweep was not launched: {refused.reasons()}"
        return answer
    except SweepRefused as refused:
        return _refused(refused)
    try:
        sweep = sweep_create(launch, spec=spec, name=asked.name, tags=asked.tags, notes=asked.notes)
    except SweepRefused as refused:
        return _refused(refused)
    location = request.build_absolute_uri(reverse("api:sweep", args=[sweep.pk]))
    return Response(sweep_dict(request, _api_sweep(request, sweep.pk)), status=201, headers={"Location": location})


@extend_schema(operation_id="sweep_detail", responses=schema.responses(sweep_schema.SweepSerializer))
@api_view(["GET"])
def sweep_detail(request, sweep_id: int):
    """`GET /api/sweeps/<id>/`: the sweep, its settings and its trials (params, state, value, reason, the
    ids of its runs, one per seed)."""
    return Response(sweep_dict(request, _api_sweep(request, sweep_id)))


def _check_documented(base: dict) -> None:
    """The base as its schema documents it (schema.RunCreateSerializer): run creation's parsing takes an
    empty or null value for a default (`"preset": ""`, `"name": null`), which this newer endpoint does not,
    so every body it accepts is one its schema calls valid. LaunchRefused by field."""
    errors = {key: [f"'{key}' must be {what}."] for key, (types, what) in BASE_TYPES.items()
              if key in base and not isinstance(base[key], types)}
    if isinstance(base.get("tags"), list) and not all(isinstance(t, str) for t in base["tags"]):
        errors["tags"] = ["'tags' must be a list of strings."]
    if errors:  # DRF's fields below would take 0 for "0"
        raise LaunchRefused(errors)
    checked = sweep_schema.SweepCreateSerializer(data={**base, "sweep": {"space": {}}})
    if not checked.is_valid():
        raise LaunchRefused({field: _messages(errors) for field, errors in checked.errors.items()})


def _messages(errors) -> list[str]:
    """A DRF error entry (a list, or a dict by item or key) as a flat list of messages."""
    if isinstance(errors, dict):
        return [m for value in errors.values() for m in _messages(value)]
    if isinstance(errors, list):
        return [m for value in errors for m in _messages(value)]
    return [str(errors)]


def _refused(refused: SweepRefused) -> Response:
    errors = {field or NON_FIELD: [message] for field, message in refused.errors.items()}
    return Response({"detail": str(refused), "errors": errors}, status=400)


def _api_sweep(request, sweep_id) -> Sweep:
    """The sweep this request may read: the user's (`sweep_get_for_user`), within a scoped token's project."""
    sweep = sweep_get_for_user(request.user, sweep_id)
    token = token_of(request)
    if token is not None and token.project_id is not None and sweep.project_id != token.project_id:
        raise Http404("No such sweep.")
    return sweep


def sweep_dict(request, sweep: Sweep) -> dict:
    """The sweep as the API answers it (sweep_schema.SweepSerializer describes it): two queries for the
    trials and their runs."""
    trials = list(sweep.trials.prefetch_related("members").order_by("number"))
    return {
        "id": sweep.pk, "name": sweep.name, "state": sweep.state,
        "url": request.build_absolute_uri(reverse("sweeps:detail", args=[sweep.pk])),
        "task": sweep.task.name, "owner": sweep.owner.get_username(), "project": sweep.project.name,
        "method": sweep.method, "seeds": sweep.seeds, "n_trials": sweep.n_trials, "parallel": sweep.parallel,
        "objective": sweep.objective, "mode": sweep.mode, "direction": sweep.direction, "pruner": sweep.pruner,
        "sampler_seed": sweep.sampler_seed, "options": sweep.options, "space": sweep.space, "config": sweep.config,
        "waiting": sweep.waiting, "created_at": sweep.created_at, "finished_at": sweep.finished_at,
        "trial_count": len(trials),
        "trials": [{
            "number": t.number, "params": t.params, "state": t.state, "value": finite_or_none(t.value), "reason": t.reason,
            "runs": [m.run_id for m in t.members.all()], "created_at": t.created_at, "finished_at": t.finished_at,
        } for t in trials],
    }
