"""One launch check for every door: the same bad launch sent through the launch form, `POST /api/runs/`,
`POST /api/sweeps/`, `manage.py launch_run` and `manage.py launch_sweep` is refused by each naming the
same field with the same words, and queues nothing."""

import html
import json

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from tests.webapp.runs.launch.test_launch import launch_data, toy_task  # noqa: F401 (fixture)
from webapp.projects.services import member_add, project_create
from webapp.runs.models import Run
from webapp.sweeps.models import Sweep

pytestmark = pytest.mark.django_db

SPACE = {"learning_rate": [0.0001, 0.0002]}
SMALL = {"steps": 2}

# (case, what the launch asks for: settings, program, project; the field refused)
CASES = {
    "the program does not fit the task": ({}, "toy_format", None, "program"),
    "a setting past its column": ({"steps": 2**40}, None, None, "steps"),
    "a DSPy-only setting on another program": ({"prompt_optimizer": "gepa"}, None, None, "prompt_optimizer"),
    "over a launch limit": ({"steps": 40, "examples_per_step": 1, "group_size": 4, "rollouts_per_example": 4,
                             "max_new_tokens": 256, "max_context_length": 1024}, None, None, "steps"),
    "a viewer's launch": ({}, None, "lab", "project"),
}


@pytest.fixture
def lab(make_user, owner):
    """A project `lab` where `owner` is a viewer."""
    project = project_create(creator=make_user("head"), name="lab")
    member_add(project, user=owner, role="viewer")
    return project


def through_the_form(client, task, values, program, project):
    data = launch_data(task, **{k: str(v) for k, v in {**SMALL, **values}.items()})
    if program:
        data["program"] = program
    if project:
        data["project"] = str(project.pk)
    response = client.post(reverse("runs:new"), data)
    if response.status_code == 403:  # a viewer: refused before the form is read
        return "project", html.unescape(response.content.decode())
    assert response.status_code == 400, response.status_code
    errors = response.context["form"].errors
    return next((field, errors[field][0]) for field in errors if field != "__all__")


def _api_body(task, values, program, project):
    body = {"task": task.name, "config": {**SMALL, **values}}
    if program:
        body["program"] = program
    if project:
        body["project"] = project.name
    return body


def _api_refusal(response):
    assert response.status_code in (400, 403), (response.status_code, response.content)
    errors = response.json()["errors"]
    field = next(iter(errors))
    return field, errors[field][0]


def through_the_runs_api(client, task, values, program, project):
    return _api_refusal(client.post("/api/runs/", json.dumps(_api_body(task, values, program, project)),
                                    content_type="application/json"))


def through_the_sweeps_api(client, task, values, program, project):
    body = {**_api_body(task, values, program, project), "sweep": {"space": SPACE, "method": "grid"}}
    return _api_refusal(client.post("/api/sweeps/", json.dumps(body), content_type="application/json"))


def _command_refusal(run_command, field):
    """(field, the command's whole refusal): `... was not ...: <field>: <message>`."""
    with pytest.raises(CommandError) as refused:
        run_command()
    return field, str(refused.value)


def _command_options(task, owner, values, program, project):
    options = {"task": task.name, "owner": owner.username, "set": [f"{k}={json.dumps(v)}" for k, v in
                                                                    {**SMALL, **values}.items()]}
    if program:
        options["program"] = program
    if project:
        options["project"] = project.name
    return options


def through_launch_run(task, owner, values, program, project, field):
    return _command_refusal(lambda: call_command("launch_run", **_command_options(task, owner, values, program,
                                                                                  project)), field)


def through_launch_sweep(task, owner, values, program, project, field, tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text('[sweep]\nmethod = "grid"\n[sweep.space]\nlearning_rate = [0.0001, 0.0002]\n')
    return _command_refusal(lambda: call_command("launch_sweep", str(path),
                                                 **_command_options(task, owner, values, program, project)), field)


@pytest.mark.parametrize("case", list(CASES))
def test_every_door_refuses_the_same_launch_naming_the_same_field_with_the_same_words(
        case, client, owner, toy_task, lab, settings, tmp_path):  # noqa: F811
    settings.COHORT_LIMIT_TOKENS_PER_RUN = 10_000
    values, program, project_name, field = CASES[case]
    project = lab if project_name else None
    client.force_login(owner)
    refusals = {
        "form": through_the_form(client, toy_task, values, program, project),
        "POST /api/runs/": through_the_runs_api(client, toy_task, values, program, project),
        "POST /api/sweeps/": through_the_sweeps_api(client, toy_task, values, program, project),
        "launch_run": through_launch_run(toy_task, owner, values, program, project, field),
        "launch_sweep": through_launch_sweep(toy_task, owner, values, program, project, field, tmp_path),
    }
    api_field, message = refusals["POST /api/runs/"]
    assert api_field == field, refusals
    for door, (door_field, door_message) in refusals.items():
        assert door_field == field, (door, refusals)
        # A page shows the message in its HTML; a command says "<field>: <message>" after what it did not do.
        said = f"{field}: {message}" if door.startswith("launch_") else message
        assert said in door_message, (door, refusals)
    assert not Run.objects.exists() and not Sweep.objects.exists()
