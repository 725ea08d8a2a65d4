"""The API by project (issue 42): `?project=`, launching into a project, tokens scoped to a project and to
reading or writing, and a viewer's 403 as JSON."""

import pytest
from django.test import Client

from tests.webapp.runs.factories import make_run
from webapp.api.services import token_create
from webapp.projects.models import Role
from webapp.projects.services import member_add, project_create
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def lab(make_user):
    users = {name: make_user(name) for name in ("ada", "alice", "vi", "quinn")}
    p = project_create(creator=users["ada"], name="lab-p")
    member_add(p, user=users["alice"], role=Role.MEMBER)
    member_add(p, user=users["vi"], role=Role.VIEWER)
    q = project_create(creator=users["quinn"], name="lab-q")
    member_add(q, user=users["alice"], role=Role.MEMBER)
    runs = {"p": make_run(users["alice"], project=p, name="in-p"), "q": make_run(users["alice"], project=q, name="in-q"),
            "personal": make_run(users["alice"], name="in-personal")}
    return {**users, "p": p, "q": q, "runs": runs}


def bearer(user, **scope) -> Client:
    return Client(headers={"Authorization": f"Bearer {token_create(user=user, name='t', **scope)[1]}"})


def names(response) -> set[str]:
    return {r["name"] for r in response.json()["results"]}


def test_the_run_list_filters_by_project_and_shows_each_runs_project(lab):
    api = bearer(lab["alice"])
    assert names(api.get("/api/runs/")) == {"in-p", "in-q", "in-personal"}
    response = api.get("/api/runs/", {"project": "LAB-P"})
    assert names(response) == {"in-p"} and response.json()["results"][0]["project"] == "lab-p"
    assert names(bearer(lab["vi"]).get("/api/runs/")) == {"in-p"}  # a viewer of lab-p reads its runs


def test_a_token_scoped_to_a_project_reads_that_project_alone(lab):
    api = bearer(lab["alice"], project=lab["p"])
    assert names(api.get("/api/runs/")) == {"in-p"}
    assert api.get(f"/api/runs/{lab['runs']['q'].pk}/").status_code == 404
    assert api.get(f"/api/runs/{lab['runs']['q'].pk}/metrics/").status_code == 404


def test_a_read_only_token_is_refused_every_write_with_403(lab):
    api = bearer(lab["alice"], can_write=False)
    assert api.get("/api/runs/").status_code == 200
    for path in ("/api/runs/", "/api/external/runs/", f"/api/runs/{lab['runs']['p'].pk}/steps/",
                 f"/api/runs/{lab['runs']['p'].pk}/finish/"):
        for method in ("post", "patch", "delete", "put"):
            response = getattr(api, method)(path, {"task": "toy"}, content_type="application/json")
            assert response.status_code == 403, (method, path)
            assert "read-only" in response.json()["detail"]
    assert not Run.objects.filter(origin="sdk").exists()


def test_launching_into_a_project_takes_a_member_and_a_viewer_gets_a_json_403(lab):
    catalog_sync()
    response = bearer(lab["alice"]).post("/api/runs/", {"task": "toy", "project": "lab-p", "config": {"steps": 2}},
                                         content_type="application/json")
    assert response.status_code == 201 and response.json()["project"] == "lab-p"
    refused = bearer(lab["vi"]).post("/api/runs/", {"task": "toy", "project": "lab-p"}, content_type="application/json")
    assert refused.status_code == 403 and "viewer of project lab-p" in refused.json()["detail"]
    unknown = bearer(lab["vi"]).post("/api/runs/", {"task": "toy", "project": "lab-q"}, content_type="application/json")
    assert unknown.status_code == 400 and "No project 'lab-q' of yours" in unknown.json()["errors"]["project"][0]
    scoped = bearer(lab["alice"], project=lab["q"])  # writes to lab-q only, and there by default
    assert scoped.post("/api/runs/", {"task": "toy", "project": "lab-p"},
                       content_type="application/json").status_code == 403
    assert scoped.post("/api/runs/", {"task": "toy", "config": {"steps": 2}},
                       content_type="application/json").json()["project"] == "lab-q"


def test_a_run_trained_elsewhere_starts_in_the_named_or_the_tokens_project(lab):
    body = {"client_id": "c1", "task": "toy_format", "project": "lab-p"}
    response = bearer(lab["alice"]).post("/api/external/runs/", body, content_type="application/json")
    assert response.status_code == 201 and Run.objects.get(external_id="c1").project == lab["p"]
    viewer = bearer(lab["vi"]).post("/api/external/runs/", {**body, "client_id": "c2"},
                                    content_type="application/json")
    assert viewer.status_code == 403 and "viewer" in viewer.json()["detail"]
    scoped = bearer(lab["alice"], project=lab["q"])
    assert scoped.post("/api/external/runs/", {"client_id": "c3", "task": "toy_format"},
                       content_type="application/json").json()["project"] == "lab-q"
    assert scoped.post("/api/external/runs/", {**body, "client_id": "c4"},
                       content_type="application/json").status_code == 403


def test_only_the_owner_logs_to_a_run_and_not_once_demoted_to_viewer(lab):
    api = bearer(lab["alice"])
    run_id = api.post("/api/external/runs/", {"client_id": "c1", "task": "toy_format", "project": "lab-p"},
                      content_type="application/json").json()["id"]
    step = {"steps": [{"step": 1, "metrics": {"loss": 1.0}}]}
    assert api.post(f"/api/runs/{run_id}/steps/", step, content_type="application/json").status_code == 200
    ada = bearer(lab["ada"])  # the project's admin reads it, but logs to no run of another's
    assert ada.post(f"/api/runs/{run_id}/steps/", step, content_type="application/json").status_code == 403
    member_add(lab["p"], user=lab["alice"], role=Role.VIEWER)
    refused = api.post(f"/api/runs/{run_id}/steps/", {"steps": [{"step": 2, "metrics": {}}]},
                       content_type="application/json")
    assert refused.status_code == 403 and "viewer" in refused.json()["detail"]
