"""The logging API's budgets (webapp/api/budget.py): a token past COHORT_LOGGING_RATE gets a 429 with
Retry-After, and the others go on; a steps post that finds every upload slot taken for
COHORT_LOGGING_QUEUE_WAIT_S gets a 503 with Retry-After, and nothing of it is stored."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from django.core.cache import cache
from django.test import Client, RequestFactory

from tests.webapp.runs.factories import make_task
from webapp.api import budget
from webapp.runs.models import StepMetric

pytestmark = pytest.mark.django_db

CREATE = "/api/external/runs/"


def post(client, url: str, body: dict):
    return client.post(url, json.dumps(body), content_type="application/json")


@pytest.fixture(autouse=True)
def fresh_budgets(monkeypatch):
    cache.clear()  # the throttle's history
    monkeypatch.setattr(budget, "_slots", None)  # the slots, sized from the settings at first use
    monkeypatch.setattr(budget, "_in_flight", Counter())
    yield
    cache.clear()


def test_a_token_past_its_rate_gets_a_429_with_retry_after_and_other_tokens_go_on(api_client, owner, stranger,
                                                                                  settings):
    settings.COHORT_LOGGING_RATE = "2/m"
    make_task("toy_format")
    mine, theirs = api_client(owner), api_client(stranger)
    body = {"client_id": "flood", "task": "toy_format"}
    assert [post(mine, CREATE, body).status_code for _ in range(2)] == [201, 200]
    refused = post(mine, CREATE, body)
    assert refused.status_code == 429 and 1 <= int(refused["Retry-After"]) <= 60
    assert "throttled" in refused.json()["detail"].lower()
    assert post(theirs, CREATE, body).status_code == 201
    assert mine.get("/api/runs/").status_code == 200  # reading is not logging: no budget of its own


def test_a_steps_post_past_the_upload_slots_is_a_503_with_retry_after_and_stores_nothing(api_client, owner, settings):
    settings.COHORT_LOGGING_CONCURRENCY, settings.COHORT_LOGGING_QUEUE_WAIT_S = 1, 0.1
    make_task("toy_format")
    client = api_client(owner)
    run_id = post(client, CREATE, {"client_id": "busy", "task": "toy_format"}).json()["id"]
    steps = {"steps": [{"step": 1, "metrics": {"loss": 1.0}}]}
    slots = budget._semaphore()
    assert slots.acquire(timeout=5)  # another upload holds the one slot
    try:
        busy = post(client, f"/api/runs/{run_id}/steps/", steps)
    finally:
        slots.release()
    assert (busy.status_code, busy["Retry-After"]) == (503, "2") and "nothing was stored" in busy.json()["detail"]
    assert not StepMetric.objects.filter(run_id=run_id).exists()
    assert post(client, f"/api/runs/{run_id}/steps/", steps).json()["stored"] == [1]


def test_a_token_with_its_share_of_posts_in_the_server_gets_a_429_at_once_and_others_go_on(token_for, owner,
                                                                                          settings):
    settings.COHORT_LOGGING_PER_TOKEN = 1
    make_task("toy_format")
    keys = {name: token_for(owner, name) for name in ("sweep", "other")}
    clients = {name: Client(headers={"Authorization": f"Bearer {key}"}) for name, key in keys.items()}
    run_id = post(clients["sweep"], CREATE, {"client_id": "sweep", "task": "toy_format"}).json()["id"]
    steps = {"steps": [{"step": 1, "metrics": {"loss": 1.0}}]}
    sweep = RequestFactory().post("/", headers={"Authorization": f"Bearer {keys['sweep']}"})
    budget._in_flight[budget._client_key(sweep)] = 1  # the sweep's token has a post in the server already
    refused = post(clients["sweep"], f"/api/runs/{run_id}/steps/", steps)
    assert (refused.status_code, refused["Retry-After"]) == (429, "2") and "1 uploads in the server" in refused.json()["detail"]
    assert not StepMetric.objects.filter(run_id=run_id).exists()
    other_run = post(clients["other"], CREATE, {"client_id": "other", "task": "toy_format"}).json()["id"]
    assert post(clients["other"], f"/api/runs/{other_run}/steps/", steps).json()["stored"] == [1]
    budget._in_flight.clear()  # the sweep's post ended
    assert post(clients["sweep"], f"/api/runs/{run_id}/steps/", steps).json()["stored"] == [1]
    assert not budget._in_flight  # every post counted out again
