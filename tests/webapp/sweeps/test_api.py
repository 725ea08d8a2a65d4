"""Sweeps through the API (webapp/api/sweep_views.py): `POST /api/sweeps/` is run creation's body plus a
`sweep` object, refused field by field as the launch form refuses it; `GET /api/sweeps/<id>/` reads the
sweep and its trials for those who may (404 for strangers); tokens and scopes are the runs API's."""

import json

import pytest
from django.test import Client

from tests.webapp.runs.launch.test_launch import toy_task  # noqa: F401 (fixture)
from webapp.api.services import token_create
from webapp.projects.services import project_create
from webapp.runs.models import Run
from webapp.sweeps.models import Sweep, Trial

pytestmark = pytest.mark.django_db

SWEEPS = "/api/sweeps/"
BASE = {"strategy": "mmgrpo", "rollouts_per_example": 8, "steps": 6}
SWEEP = {"space": {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}, "group_size": [4, 8]},
         "method": "tpe", "seeds": 2, "n_trials": 8, "parallel": 2, "objective": "", "mode": "last",
         "direction": "maximize", "pruner": "median", "sampler_seed": 0, "options": {"startup_trials": 2}}


def bearer(user, **token) -> Client:
    return Client(headers={"Authorization": f"Bearer {token_create(user=user, name='tests', **token)[1]}"})


def post(client, *, sweep=None, **body):
    payload = {"task": "toy", "name": "lr search", "config": BASE, **body}
    if sweep is not False:
        payload["sweep"] = {**SWEEP, **(sweep or {})}
    return client.post(SWEEPS, json.dumps(payload), content_type="application/json")


def nothing_created():
    return not Sweep.objects.exists() and not Trial.objects.exists() and not Run.objects.exists()


def test_a_token_launches_a_sweep_and_reads_it_back(owner, toy_task):  # noqa: F811
    client = bearer(owner)
    response = post(client)
    assert response.status_code == 201, response.json()
    body = response.json()
    sweep = Sweep.objects.get(pk=body["id"])
    assert response["Location"].endswith(f"/api/sweeps/{sweep.pk}/")
    assert body["state"] == "running" and body["url"].endswith(f"/sweeps/{sweep.pk}/")
    assert body["trial_count"] == 2 and len(body["trials"]) == 2  # two configurations at once
    assert (sweep.owner, sweep.name, sweep.method, sweep.seeds, sweep.n_trials, sweep.pruner) == (
        owner, "lr search", "tpe", 2, 8, "median")
    assert sweep.options == {"startup_trials": 2} and sweep.config["strategy"] == "mmgrpo"
    assert sweep.space["group_size"] == {"values": [4, 8]}
    for trial in body["trials"]:
        assert trial["state"] == "running" and trial["value"] is None and len(trial["runs"]) == 2
        assert set(trial["params"]) == {"learning_rate", "group_size"}
        runs = Run.objects.filter(pk__in=trial["runs"])
        assert {r.state for r in runs} == {Run.State.QUEUED} and {r.config["seed"] for r in runs} == {0, 1}
    read = client.get(f"{SWEEPS}{sweep.pk}/")
    assert read.status_code == 200 and read.json()["trials"] == body["trials"]
    assert read.json()["objective"] in ("reward/mean", "eval/reward/mean")


@pytest.mark.parametrize(("sweep", "field", "message"), [
    ({"space": {"learning_rate": {"low": 1e-3, "high": 1e-5}}}, "learning_rate", "must be below its high"),
    ({"space": {"model": {"low": 1, "high": 2}}}, "model", "model is not numeric"),
    ({"space": {"no_such": [1, 2]}}, "no_such", "RunConfig has no setting"),
    ({"space": {"seed": [1, 2]}}, "seed", "swept by 'seeds'"),
    ({"space": {"learning_rate": [0.1, "", 0.2]}}, "learning_rate", "value 2 of 3 is empty"),
    ({"space": {"learning_rate": {"values": [0.1, None]}}}, "learning_rate", "value 2 of 2 is empty"),
    ({"space": {}}, "sweep", "Choose at least one setting to sweep"),
    ({"space": {"steps": [1, 2**40]}}, "steps", "at most"),
    ({"space": {"learning_rate": [1e-4, 10**400]}}, "learning_rate", "at most"),
    ({"method": "bayes"}, "sweep_method", "Choose one of grid, random, tpe"),
    ({"seeds": 0}, "sweep_seeds", "from 1 to 10"),
    ({"seeds": "2"}, "sweep_seeds", "from 1 to 10"),
    ({"n_trials": 1001}, "sweep_n_trials", "from 1 to 1000"),
    ({"parallel": 33}, "sweep_parallel", "from 1 to 32"),
    ({"pruner": "asha"}, "sweep_pruner", "Choose one of"),
    ({"objective": 3}, "sweep_objective", "step metric"),
    ({"sampler_seed": -1}, "sweep_sampler_seed", "from 0 to"),
    ({"options": {"nope": 1}}, "sweep_options", "Unknown option"),
    ({"options": {"grid_points": "x"}}, "sweep_options", "whole numbers"),
    ({"options": [1]}, "sweep_options", "whole numbers"),
    ({"surprise": 1}, "sweep", "Unknown sweep setting"),
    ({"method": "grid", "n_trials": None, "parallel": 1, "seeds": 1,
      "space": {"steps": list(range(1, 41)), "max_new_tokens": list(range(1, 41))}}, "sweep", "The grid has 1,600"),
])
def test_every_refusal_names_its_field_and_queues_nothing(owner, toy_task, sweep, field, message):  # noqa: F811
    response = post(bearer(owner), sweep=sweep)
    assert response.status_code == 400, response.content
    body = response.json()
    assert message in " ".join(body["errors"][field]), body
    assert body["detail"].startswith("The sweep was not launched")
    assert nothing_created()


def test_a_bad_base_or_body_is_refused_as_a_runs_is(owner, toy_task):  # noqa: F811
    client = bearer(owner)
    response = post(client, config={"group_size": 0})
    assert response.status_code == 400 and "group_size" in response.json()["errors"]
    assert response.json()["detail"].startswith("The sweep was not launched")  # the base, checked as a run
    assert post(client, sweep={"space": {"group_size": [4, 8]}}, task="no-such").json()["errors"]["task"]
    for body in ([1, 2], {"task": "toy"}, {"task": "toy", "sweep": {"space": {"model": ["a\x00"]}}},
                 {"task": "toy", "sweep": {"method": "tpe"}}):  # no space: found by the schema fuzz
        response = client.post(SWEEPS, json.dumps(body), content_type="application/json")
        assert response.status_code == 400 and "detail" in response.json(), body
    assert post(client, sweep=False).status_code == 400  # no "sweep": use POST /api/runs/
    # What run creation's parsing lets pass as "the default" but its schema does not document is refused.
    for change, field in (({"preset": ""}, "preset"), ({"preset": 0}, "preset"), ({"name": None}, "name"),
                          ({"tags": [""]}, "tags"), ({"task": toy_task.pk}, "task")):
        response = post(client, **change)
        assert response.status_code == 400 and field in response.json()["errors"], (change, response.json())
    response = client.post(SWEEPS, json.dumps({"task": "toy", "sweep": [1]}), content_type="application/json")
    assert response.status_code == 400 and "sweep" in response.json()["errors"]
    assert nothing_created()


def test_anonymous_is_401_a_stranger_404_and_a_read_only_token_403(owner, stranger, toy_task):  # noqa: F811
    assert post(Client()).status_code == 401
    assert post(Client(headers={"Authorization": "Bearer nope"})).status_code == 401
    assert post(bearer(owner, can_write=False)).status_code == 403
    assert nothing_created()
    sweep_id = post(bearer(owner)).json()["id"]
    assert Client().get(f"{SWEEPS}{sweep_id}/").status_code == 401
    assert bearer(stranger).get(f"{SWEEPS}{sweep_id}/").status_code == 404
    assert bearer(stranger).get(f"{SWEEPS}{sweep_id + 1000}/").status_code == 404
    assert bearer(owner, can_write=False).get(f"{SWEEPS}{sweep_id}/").status_code == 200
    session = Client(enforce_csrf_checks=True)
    session.force_login(owner)
    assert session.get(f"{SWEEPS}{sweep_id}/").status_code == 200
    assert post(session).status_code == 403  # a session POST without the CSRF token


def test_a_token_scoped_to_a_project_launches_and_reads_there_only(owner, toy_task):  # noqa: F811
    lab = project_create(creator=owner, name="lab")
    other = project_create(creator=owner, name="other")
    scoped = bearer(owner, project=lab)
    response = post(scoped)
    assert response.status_code == 201 and response.json()["project"] == "lab"
    assert post(scoped, project="other").status_code == 403
    elsewhere = post(bearer(owner), project=other.name).json()["id"]
    assert scoped.get(f"{SWEEPS}{elsewhere}/").status_code == 404
    assert bearer(owner).get(f"{SWEEPS}{elsewhere}/").status_code == 200


def test_the_schema_documents_the_sweep_endpoints(owner):
    client = Client()
    client.force_login(owner)
    schema = client.get("/api/schema/").json()
    create = schema["paths"]["/api/sweeps/"]["post"]
    assert create["operationId"] == "sweeps_create"
    assert {"201", "400", "401", "403"} <= set(create["responses"])
    body = schema["components"]["schemas"][create["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                                           .rsplit("/", 1)[1]]
    assert "sweep" in body["required"] and "task" in body["required"]
    settings = schema["components"]["schemas"]["SweepSettingsRequest"]["properties"]
    assert {"space", "method", "seeds", "n_trials", "parallel", "objective", "mode", "direction", "pruner",
            "sampler_seed", "options"} <= set(settings)
    detail = schema["paths"]["/api/sweeps/{sweep_id}/"]["get"]
    assert detail["operationId"] == "sweep_detail" and {"200", "401", "404"} <= set(detail["responses"])
    trial = schema["components"]["schemas"]["Trial"]["properties"]
    assert {"params", "state", "value", "reason", "runs"} <= set(trial)
