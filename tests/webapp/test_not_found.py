"""Cohort's own "not found" (webapp/not_found.py): its 404 page for a page and JSON for the API and the
pages' JSON endpoints, with DEBUG on (as `make run` serves) and off; a trailing slash too many is
redirected to the page; a view's own 404 answer is left as the view made it."""

from __future__ import annotations

import pytest

from tests.webapp.runs.factories import make_run

pytestmark = pytest.mark.django_db


@pytest.fixture(params=[True, False], ids=["debug", "no-debug"])
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


def test_a_missing_run_is_cohorts_404_page_whether_debug_is_on_or_not(client, owner, debug):
    client.force_login(owner)
    for path in ("/runs/999999/", "/runs/999999/steps/3/", "/no/such/page/"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert "404.html" in [t.name for t in response.templates], path
        body = response.content.decode()
        assert "<h1>Not found</h1>" in body and 'id="not-found-runs"' in body
        assert "URLconf" not in body and "DEBUG" not in body  # not Django's technical page


def test_a_step_the_run_lacks_says_so(client, owner, debug):
    run = make_run(owner)
    client.force_login(owner)
    response = client.get(f"/runs/{run.pk}/steps/3/")
    assert response.status_code == 404
    assert "Step 3 of this run is not stored." in response.content.decode()


def test_the_api_and_the_json_endpoints_answer_json(client, owner, debug):
    client.force_login(owner)
    api = client.get("/api/runs/999999/")
    assert api.status_code == 404 and api["Content-Type"] == "application/json" and "detail" in api.json()
    metrics = client.get("/runs/999999/metrics.json")
    assert metrics.status_code == 404 and metrics["Content-Type"] == "application/json"
    assert set(metrics.json()) == {"error"}


def test_anonymous_readers_get_the_page_too(client, debug):
    response = client.get("/no/such/page/")
    assert response.status_code == 404 and "<h1>Not found</h1>" in response.content.decode()


def test_a_trailing_slash_too_many_is_redirected_to_the_page(client, owner, debug):
    client.force_login(owner)
    response = client.get("/runs/new/")
    assert response.status_code == 301 and response["Location"] == "/runs/new"
    assert client.get("/runs/new/", follow=True).status_code == 200
    response = client.get("/runs/compare/?runs=1&runs=2")
    assert response.status_code == 301 and response["Location"] == "/runs/compare?runs=1&runs=2"
    assert client.post("/runs/new/").status_code == 404  # a form's body would be lost: no redirect
    assert client.get("/runs/nothing-here/").status_code == 404
    assert client.get("//runs/new/").status_code == 404  # never to another host
    response = client.get("/runs")  # Django's APPEND_SLASH, the other way, still works
    assert response.status_code == 301 and response["Location"] == "/runs/"


def test_a_views_own_404_answer_is_kept(client, owner, debug):
    client.force_login(owner)
    response = client.get("/runs/", {"project": "nope"})
    assert response.status_code == 404
    assert "No project &#x27;nope&#x27; of yours" in response.content.decode()
    assert "404.html" not in [t.name for t in response.templates]
