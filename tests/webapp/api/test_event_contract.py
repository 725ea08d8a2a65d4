"""The step-event contract (trainer/run/events.py) is the one place a bound is declared: change one
there and the SDK, the logging API and the ingest all hold a step to the new bound."""

import json

import pytest

from cohort.sdk import values
from tests.webapp.api.test_logging_api import post, trl_run  # noqa: F401 (fixture)
from tests.webapp.runs.factories import make_run
from trainer.run import events
from webapp.runs.ingest.store import step_events_ingest
from webapp.runs.models import Run, StepMetric

pytestmark = pytest.mark.django_db


def step_event(step: int) -> dict:
    return {"type": "step", "attempt": 1, "step": step, "metrics": {"loss": 0.5}, "rollouts": [], "groups": []}


def test_a_step_bound_changed_in_the_contract_is_followed_by_the_sdk_the_logging_api_and_the_ingest(
        monkeypatch, trl_run, owner):  # noqa: F811
    monkeypatch.setattr(events, "MAX_STEP", 10)
    # The SDK refuses the step at the call that makes it.
    assert values.step_number(10) == 10
    with pytest.raises(ValueError, match="10"):
        values.step_number(11)
    # The logging API answers 400 naming the step.
    run_id, client = trl_run
    refused = post(client, f"/api/runs/{run_id}/steps/", {"steps": [{"step": 11, "metrics": {"loss": 1.0}}]})
    assert refused.status_code == 400 and "steps[0].step" in json.dumps(refused.json())
    assert post(client, f"/api/runs/{run_id}/steps/", {"steps": [{"step": 10, "metrics": {"loss": 1.0}}]}).status_code == 200
    # The ingest of a trainer's event log refuses it too, and stores nothing of it.
    run = make_run(owner, state=Run.State.RUNNING)
    with pytest.raises(ValueError, match="from 0 to 10"):
        step_events_ingest(run, [step_event(11)])
    assert not StepMetric.objects.filter(run=run).exists()
    assert [m.step for m in step_events_ingest(run, [step_event(10)])] == [10]


def test_every_reader_keeps_a_number_the_same_way():
    import numpy as np

    assert [events.finite_or_none(v) for v in (1, 2.5, np.float32(0.5), float("nan"), float("inf"), None, "3")] == [
        1.0, 2.5, 0.5, None, None, None, None]
