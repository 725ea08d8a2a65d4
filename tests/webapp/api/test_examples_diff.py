"""`GET /api/examples/diff/`: the part-ways table as JSON, for the owner, a stranger, anonymous and staff;
its pages, counts and refusals (webapp/api/examples_views.py)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.webapp.runs.examples.partways_world import EXPECTED_CATEGORY, EXPECTED_ORDER, world
from tests.webapp.runs.factories import make_program
from tests.webapp.runs.seeding import make_run
from webapp.api.services import token_create
from webapp.projects.services import project_create
from webapp.runs.models import Task

pytestmark = pytest.mark.django_db
URL = "/api/examples/diff/"


@pytest.fixture
def sides(owner):
    return world(owner)


def query(gdpo, grpo, **extra) -> dict:
    return {"a": ",".join(str(r.pk) for r in gdpo), "b": ",".join(str(r.pk) for r in grpo), **extra}


@pytest.mark.parametrize("who, status", [("owner", 200), ("stranger", 404), ("anonymous", 401), ("staff", 200)])
def test_who_reads_the_table(api_client, users, sides, who, status):
    response = api_client(users[who]).get(URL, query(*sides))
    assert response.status_code == status and response["Content-Type"].startswith("application/json")
    if status != 200:
        assert response.json()["detail"]
        return
    body = response.json()
    assert [r["example_id"] for r in body["results"]] == EXPECTED_ORDER
    assert {r["example_id"]: r["category"] for r in body["results"]} == EXPECTED_CATEGORY
    assert body["counts"] == {"learned_a": 4, "learned_b": 1, "lost_a": 0, "lost_b": 1, "solved_both": 1,
                              "unsolved_both": 1, "only_a": 1, "only_b": 0}
    assert [s["id"] for s in body["a"]] == [r.pk for r in sides[0]] and body["a"][0]["solved"] == 1.0
    first = body["results"][0]
    assert (first["a_early"], first["a_late"], first["b_late"], first["a_runs"], first["a_first_right"]) == (0.0, 1.0, 0.0, 3, 7)
    assert body["notes"] == [] and body["count"] == 9 and body["next"] is None


def test_pages_kind_and_solved(api_client, owner, sides):
    client = api_client(owner)
    first = client.get(URL, query(*sides, limit=4)).json()
    assert [r["example_id"] for r in first["results"]] == EXPECTED_ORDER[:4] and first["count"] == 9
    second = client.get(first["next"]).json()
    assert [r["example_id"] for r in second["results"]] == EXPECTED_ORDER[4:8]
    assert second["counts"] == first["counts"]  # over the whole table
    learned = client.get(URL, query(*sides, kind="learned_a")).json()
    assert [r["example_id"] for r in learned["results"]] == ["e1", "e2", "e3", "e8"] and learned["count"] == 4
    assert client.get(URL, query(*sides, solved=0.5)).json()["counts"]["solved_both"] == 8
    # The queries do not grow with the seeds: one run a side costs as many as three.
    with CaptureQueriesContext(connection) as queries:
        assert client.get(URL, query(*sides, limit=4)).status_code == 200
    few = len(queries)
    with CaptureQueriesContext(connection) as queries:
        assert client.get(URL, query(sides[0][:1], sides[1][:1], limit=4)).status_code == 200
    assert len(queries) == few


@pytest.mark.parametrize("params, message", [
    ({"b": "1"}, "'a' names no run"),
    ({"a": "1", "b": ""}, "'b' names no run"),
    ({"a": "1;2", "b": "3"}, "'a' takes up to 16 run ids"),
    ({"a": "1", "b": "3", "solved": ""}, "'solved' must be a number"),
    ({"a": "1", "b": "3", "solved": "inf"}, "'solved' must be a number"),
    ({"a": "1", "b": "3", "solved": "-1e400"}, "'solved' must be a finite number"),
    ({"a": "1", "b": "3", "kind": "learned"}, "'kind' must be one of"),
    ({"a": "1", "b": "3", "limit": "501"}, "'limit' must be between 1 and 500"),
])
def test_malformed_parameters_are_a_400(api_client, owner, params, message):
    response = api_client(owner).get(URL, params)
    assert response.status_code == 400 and message in response.json()["detail"]


def test_runs_of_different_tasks_are_a_400(api_client, owner, sides):
    gdpo, grpo = sides
    client = api_client(owner)
    same = client.get(URL, {"a": gdpo[0].pk, "b": gdpo[0].pk})  # no error: a table where nothing parts, said
    assert same.status_code == 200 and same.json()["notes"][0].startswith("Both sides are the same runs")
    other = make_run(owner, name="elsewhere")
    other.task = Task.objects.create(name="other-task", title="Other", program=make_program())
    other.save(update_fields=["task"])
    different = client.get(URL, {"a": gdpo[0].pk, "b": other.pk})
    assert different.status_code == 400 and "different tasks" in different.json()["detail"]
    assert client.get(URL, {"a": gdpo[0].pk, "b": 987654321}).status_code == 404


def test_a_token_scoped_to_another_project_reads_none_of_them(client, owner, sides):
    elsewhere = project_create(creator=owner, name="elsewhere")
    key = token_create(user=owner, name="scoped", project=elsewhere)[1]
    response = client.get(URL, query(*sides), headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 404
