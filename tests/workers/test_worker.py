"""A real Celery worker process consumes both queues with the project's settings."""

import pytest

from webapp.celery import app

NEUTRAL = ("a real worker answering a ping on both queues; its only queries are the worker's report at "
           "start, which every real-worker test makes, on both backends in tests/workers/test_run_train.py")


@pytest.mark.slow
@pytest.mark.backend_neutral(reason=NEUTRAL)
def test_worker_answers_on_default_and_gpu_queues(celery_worker_process):
    default = app.send_task("workers.tasks.ping_task")
    gpu = app.send_task("workers.tasks.ping_task", queue="gpu")
    assert default.get(timeout=30)["pid"] > 0
    assert gpu.get(timeout=30)["pid"] > 0


def test_celery_settings_fit_long_gpu_tasks():
    conf = app.conf
    assert conf.task_acks_late is True
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_routes["workers.tasks.run_train_task"] == {"queue": "gpu"}
    assert conf.task_default_queue == "default"
    assert conf.broker_transport_options["visibility_timeout"] >= 12 * 3600


def test_a_broker_blip_does_not_cancel_a_running_training_task():
    assert app.conf.worker_cancel_long_running_tasks_on_connection_loss is False
