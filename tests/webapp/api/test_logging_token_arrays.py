"""The logging API's per-token arrays (issue 45): good `tokens` / `logprobs` / `entropies` reach the
call's stored details; a bad one is a 400 naming it while the rest of the step is stored."""

from __future__ import annotations

import json

import pytest

from tests.webapp.api import test_logging_api
from tests.webapp.api.test_logging_api import post, rollout, steps_body
from webapp.runs.ingest import external
from webapp.runs.models import CallText, Rollout, StepMetric

pytestmark = pytest.mark.django_db

trl_run = test_logging_api.trl_run  # the external run these tests log to (a fixture)


def token_rollout(completion="Hello", **fields):
    return rollout(completion=completion, group=0, **{"tokens": ["He", "llo", "<|im_end|>"],
                                                       "logprobs": [-0.5, -0.25, -1e-4], "entropies": [1.0, 2.0, 3.0],
                                                       **fields})


@pytest.fixture
def ingested(monkeypatch):
    """The step events the API hands to the ingest (the real one still runs)."""
    events = []

    def spy(run, step_events):
        events.extend(step_events)
        return real(run, step_events)

    real = external.step_events_ingest
    monkeypatch.setattr(external, "step_events_ingest", spy)
    return events


def test_good_token_arrays_are_stored_with_their_call(trl_run, ingested):
    run_id, client = trl_run
    body = steps_body(metrics={"loss": 0.5}, rollouts=[token_rollout(), token_rollout("Hi", tokens=["Hi"],
                                                                                      logprobs=None, entropies=[6.0])])
    response = post(client, f"/api/runs/{run_id}/steps/", body)
    assert response.status_code == 200 and response.json() == {"run": run_id, "stored": [1], "skipped": []}
    calls = [t["calls"][0] for t in ingested[0]["rollouts"]]
    assert calls[0]["tokens"] == {"pieces": ["He", "llo", "<|im_end|>"], "sampler": [-0.5, -0.25, -1e-4],
                                  "entropy": [1.0, 2.0, 3.0]}
    assert calls[1]["tokens"] == {"pieces": ["Hi"], "entropy": [6.0]}
    assert StepMetric.objects.get(run_id=run_id).metrics["tokens/entropy/mean"] == pytest.approx(12.0 / 4)
    assert CallText.objects.filter(run_id=run_id, tokens__isnull=False).exists()


BAD_ARRAYS = [  # (the rollout's fields, the field named, what its message says)
    ({"logprobs": [-0.5, -0.25]}, "logprobs", "2 values for 3 tokens"),
    ({"entropies": [1.0, 2.0, 3.0, 4.0]}, "entropies", "4 values for 3 tokens"),
    ({"entropies": [1.0, None, 3.0]}, "entropies", "item 1 must be a number, not null"),
    ({"logprobs": [-0.5, "x", -1.0]}, "logprobs", "item 1 must be a number, not a string"),
    ({"logprobs": [-0.5, 0.5, -1.0]}, "logprobs", "item 1 is 0.5: a log-prob is at most 0"),
    ({"entropies": [1.0, -0.1, 3.0]}, "entropies", "item 1 is -0.1: an entropy is at least 0"),
    ({"entropies": [1.0, 10 ** 400, 3.0]}, "entropies", "item 1 is too large for a number"),
    ({"logprobs": {"a": 1}}, "logprobs", "must be a list of numbers"),
    ({"tokens": ["a"] * 32_769, "logprobs": None, "entropies": None}, "tokens", "holds 32,769 tokens; at most 32,768"),
    ({"tokens": ["x" * 1_001, "b", "c"]}, "tokens", "item 0 has 1,001 characters; at most 1,000"),
    ({"tokens": "Hello"}, "tokens", "must be a list of strings"),
    ({"tokens": ["a", 7, "c"]}, "tokens", "item 1 must be a string"),
    ({"tokens": None, "entropies": None}, "logprobs", "needs tokens"),
]


@pytest.mark.parametrize("fields, field, message", BAD_ARRAYS)
def test_a_bad_token_array_is_a_400_naming_it_and_the_rest_of_the_step_is_stored(trl_run, ingested, fields, field,
                                                                                  message):
    """Issue 45: "Bad arrays (wrong lengths, NaN, too long) get a 400 that names the field; the rest of
    the step is kept": the step, its metrics, its rollouts, and the other rollouts' good arrays."""
    run_id, client = trl_run
    body = steps_body(metrics={"loss": 0.5}, rollouts=[token_rollout(), token_rollout("Hi", **fields)])
    response = post(client, f"/api/runs/{run_id}/steps/", body)
    assert response.status_code == 400, response.content[:300]
    answer = response.json()
    path = f"steps[0].rollouts[1].{field}"
    assert list(answer["errors"]) == [path] and message in answer["errors"][path][0], answer
    assert path in answer["detail"] and "the rest of the post was stored" in answer["detail"]
    assert (answer["run"], answer["stored"], answer["skipped"]) == (run_id, [1], [])
    assert Rollout.objects.filter(run_id=run_id, step=1).count() == 2
    metrics = StepMetric.objects.get(run_id=run_id, step=1).metrics
    assert metrics["loss"] == 0.5 and metrics["reward/mean"] == 1.0 and "group_var/completion" in metrics
    first, second = (t["calls"][0] for t in ingested[0]["rollouts"])
    assert first["tokens"]["entropy"] == [1.0, 2.0, 3.0]  # the good rollout's arrays are kept
    sent = {"tokens": "pieces", "logprobs": "sampler", "entropies": "entropy"}
    if field == "tokens" or fields.get("tokens", "sent") is None:
        assert "tokens" not in second  # no good tokens: nor the arrays that need them
    else:  # only the bad array is left out
        assert set(second["tokens"]) == {sent[key] for key in sent if key != field and token_rollout().get(key)}
    again = post(client, f"/api/runs/{run_id}/steps/", body)  # a client's retry: nothing stored twice
    assert again.status_code == 400 and (again.json()["stored"], again.json()["skipped"]) == ([], [1])
    assert Rollout.objects.filter(run_id=run_id).count() == 2


def test_nan_in_a_token_array_is_named_like_a_wrong_length(trl_run):
    """JSON has no NaN, but Python's json.dumps writes one (and Infinity): read as numbers, they are
    refused by name; a NaN metric is a 400 that stores nothing, as before."""
    run_id, client = trl_run
    body = json.dumps(steps_body(metrics={"loss": 0.5}, rollouts=[token_rollout(entropies=[1.0, float("nan"), 3.0]),
                                                                   token_rollout(logprobs=[-1.0, float("-inf"), 0.0])]))
    assert "NaN" in body and "-Infinity" in body
    response = post(client, f"/api/runs/{run_id}/steps/", body)
    assert response.status_code == 400 and response.json()["errors"] == {
        "steps[0].rollouts[0].entropies": ["item 1 is nan: per-token values must be finite"],
        "steps[0].rollouts[1].logprobs": ["item 1 is -inf: per-token values must be finite"]}
    assert response.json()["stored"] == [1] and Rollout.objects.filter(run_id=run_id).count() == 2
    metric = post(client, f"/api/runs/{run_id}/steps/", '{"steps": [{"step": 2, "metrics": {"loss": NaN}}]}')
    assert metric.status_code == 400 and "steps[0].metrics['loss'] must be finite" in metric.json()["detail"]
    assert "errors" not in metric.json() and not StepMetric.objects.filter(run_id=run_id, step=2).exists()


def test_a_bad_token_array_beside_another_refusal_stores_nothing(trl_run):
    run_id, client = trl_run
    body = steps_body(rollouts=[token_rollout(logprobs=[0.0]), token_rollout(reward="1")])
    response = post(client, f"/api/runs/{run_id}/steps/", body)
    assert response.status_code == 400 and "steps[0].rollouts[1].reward must be a number" in response.json()["detail"]
    assert "stored" not in response.json() and not StepMetric.objects.filter(run_id=run_id).exists()


def test_many_bad_arrays_are_all_named_in_errors_and_the_first_in_detail(trl_run):
    run_id, client = trl_run
    body = {"steps": [{"step": s, "rollouts": [token_rollout(entropies=[-1.0] * 3)] * 4} for s in (1, 2)]}
    answer = post(client, f"/api/runs/{run_id}/steps/", body).json()
    assert len(answer["errors"]) == 8 and answer["stored"] == [1, 2]
    assert answer["detail"].startswith("8 per-token arrays refused (and 3 more): steps[0].rollouts[0].entropies")
