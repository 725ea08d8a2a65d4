"""The logging API's budgets (webapp/api/budget.py): a token past COHORT_LOGGING_RATE gets a 429 with
Retry-After, and the others go on; a steps post that finds every upload slot taken for
COHORT_LOGGING_QUEUE_WAIT_S gets a 503 with Retry-After, and nothing of it is stored."""

from __future__ import annotations

import json

import pytest
from django.core.cache import cache

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
    with budget.logging_slot():  # another upload holds the one slot
        busy = post(client, f"/api/runs/{run_id}/steps/", steps)
    assert (busy.status_code, busy["Retry-After"]) == (503, "2") and "nothing was stored" in busy.json()["detail"]
    assert not StepMetric.objects.filter(run_id=run_id).exists()
    assert post(client, f"/api/runs/{run_id}/steps/", steps).json()["stored"] == [1]
