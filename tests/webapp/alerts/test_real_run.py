"""A real run (Celery worker, trainer subprocess, supervisor ingest) whose loss is NaN: the
nonfinite alert fires from the ingest path, the finished alert from the final transition, and
the finished alert's webhook reaches a real HTTP server."""

import pytest

from tests.conftest import wait_for
from tests.webapp.runs.factories import make_task
from tests.workers.test_run_train import toy_config, wait_for_state
from webapp.alerts.models import Alert, Kind
from webapp.alerts.services import rule_save
from webapp.runs.launch.check import Launch
from webapp.runs.models import Run, StepMetric
from webapp.runs.services import run_create

NEUTRAL = ("a real worker's NaN run raising nonfinite at ingest and finished at its last transition, and the "
           "webhook reaching a real server; the evaluation at ingest and at transitions (one open alert per "
           "rule and run, concurrent evaluations) is tested on both backends in "
           "tests/webapp/alerts/test_evaluation.py, a real worker's training and ingest in "
           "tests/workers/test_run_train.py")
pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]

# demo_inf (tests/plugins/cohort-demo-plugin) gives odd-length outputs an infinite reward: within a
# group of varied outputs the advantages, the loss and the gradient norm are NaN.
NAN_REWARDS = [{"name": "exact_match", "weight": 1.0, "params": {}}, {"name": "demo_inf", "weight": 1.0, "params": {}}]


def test_a_run_with_a_nan_loss_raises_nonfinite_once_and_finished_reaches_the_webhook(
        celery_worker_process, owner, webhook_server, test_plugins):
    rule_save(owner=owner, kind=Kind.FINISHED, run=None, params={}, email=False, webhook_url=webhook_server.url,
              enabled=True)
    run = run_create(Launch(owner=owner, task=make_task(), config=toy_config(steps=3, rewards=NAN_REWARDS)), name="nan-run")
    log = celery_worker_process.log_path
    run = wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, log=log)
    assert run.state == Run.State.SUCCEEDED, run.error
    losses = [m.metrics.get("loss", "absent") for m in StepMetric.objects.filter(run=run)]
    assert losses == [None, None, None]  # the trainer's NaN, stored as null
    [nonfinite] = Alert.objects.filter(run=run, kind=Kind.NONFINITE)
    assert nonfinite.step == 1 and nonfinite.is_open and "not finite" in nonfinite.message
    # The finished alert is written by a listener after the state change commits: the worker may not
    # have written it yet when the run first reads as succeeded.
    wait_for(lambda: Alert.objects.filter(run=run, kind=Kind.FINISHED).exists(), 60, "the finished alert", log)
    [finished] = Alert.objects.filter(run=run, kind=Kind.FINISHED)
    assert finished.step == 3
    wait_for(lambda: webhook_server.requests, 60, "the finished alert's webhook", log)
    payload = webhook_server.requests[0]["json"]
    assert payload["kind"] == "finished" and payload["run"]["id"] == run.pk and payload["run"]["name"] == "nan-run"
    wait_for(lambda: Alert.objects.get(pk=finished.pk).webhook_status == Alert.Webhook.DELIVERED, 30,
             "the delivery to be recorded", log)
