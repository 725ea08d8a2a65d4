"""A run survives Redis going away mid-run (docs/explanation/architecture.md "How a run flows": the database is the source
of truth, the websocket only notifies): every step is stored through the outage and the open page
resyncs from its last seq. Real processes: a Celery worker, daphne, and a private Redis that gets
SIGKILLed and restarted on its port. The trainer waits at its step gate for the steps the test allows.
"""

from __future__ import annotations

import time

import pytest
from channels_redis.core import RedisChannelLayer

from tests.conftest import asgi_server_process, celery_worker, wait_for
from tests.workers.resilience import (
    TERMINAL,
    assert_every_step_stored_once,
    celery_app_for,
    connect_when_ready,
    event_log_steps,
    get_json,
    open_socket,
    queued_run,
    receive_json,
    session_cookie,
    stored_steps,
    worker_env,
)
from tests.workers.test_run_train import wait_for_state
from webapp.runs.models import Run, StepMetric
from webapp.runs.services import TRAIN_TASK
from webapp.stack import EmbeddedRedis

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


# --- Redis restarted mid-run ----------------------------------------------------------------

REDIS_RUN_STEPS = 8
STEPS_BEFORE_REDIS_DIES = 3
STEPS_WHILE_REDIS_IS_DOWN = 2
REDIS_DOWN_AT_LEAST_S = 3.0


@pytest.mark.backend_neutral(reason=(
    "a Redis outage under a real worker and daphne: the run's steps are stored through it and the page "
    "resyncs from its last seq; the metrics-after-seq query it reads is tested on both backends in "
    "tests/webapp/runs/charts/test_series_views.py, the ingest in tests/webapp/runs/ingest/test_store.py"))
def test_redis_restarted_mid_run_loses_no_step_and_the_page_resyncs(owner, tmp_path, model_cache_dir, step_gate):
    redis = EmbeddedRedis(tmp_path / "redis")
    redis_url = redis.start()
    app = celery_app_for(redis_url)
    env = worker_env(tmp_path, model_cache_dir, step_gate, REDIS_URL=redis_url)
    cookie = session_cookie(owner)
    step_gate.allow(STEPS_BEFORE_REDIS_DIES)
    try:
        with (celery_worker(tmp_path / "worker.log", env, app=app) as worker,
              asgi_server_process(tmp_path / "daphne.log", env) as base_url):
            log = worker.log_path
            run = queued_run(owner, REDIS_RUN_STEPS)
            socket_url = f"{base_url}/ws/runs/{run.pk}/"
            with open_socket(socket_url, cookie) as before:
                # A quiet socket stays open: the consumer blocks in Redis for `brpop_timeout` per
                # read (redis-py 8's default 5 s socket timeout once made it crash right then).
                time.sleep(RedisChannelLayer.brpop_timeout + 1.5)
                app.send_task(TRAIN_TASK, args=[run.pk], queue="gpu")
                # The claim is announced: an open page sees queued -> running.
                assert receive_json(before, timeout_s=120) == {
                    "type": "status", "run": run.pk, "state": "running", "current_step": 0, "error": "",
                    "pruned_reason": ""}
                seen = [receive_json(before, timeout_s=120) for _ in range(STEPS_BEFORE_REDIS_DIES)]
                assert [(n["type"], n["seq"], n["step"]) for n in seen] == [("step", 1, 1), ("step", 2, 2), ("step", 3, 3)]
                last_seen = seen[-1]["seq"]

                redis.kill()
                down_since = time.monotonic()
                # Without Redis, training and shipping to the database go on; the trainer then
                # waits at the gate, so the test knows which steps came before the page resyncs.
                stored_while_down = STEPS_BEFORE_REDIS_DIES + STEPS_WHILE_REDIS_IS_DOWN
                step_gate.allow(stored_while_down)
                wait_for(lambda: stored_steps(run) == stored_while_down, 120, "steps stored while Redis is down", log)
                # Their notices were tried and lost (not merely late: one must not reach the new socket).
                failed_notice = f"could not notify run {run.pk} watchers"
                wait_for(lambda: log.read_text().count(failed_notice) >= STEPS_WHILE_REDIS_IS_DOWN, 60,
                         "the lost notices of the steps stored while Redis is down", log)
                assert event_log_steps(tmp_path, run) == stored_while_down
                time.sleep(max(0.0, REDIS_DOWN_AT_LEAST_S - (time.monotonic() - down_since)))  # the outage's length
                assert worker.poll() is None, log.read_text()
                redis.start(port=redis.port)

            # The page resyncs: reconnect (group membership died with Redis), then refetch after
            # the last seq it saw: exactly the points it missed.
            with connect_when_ready(socket_url, cookie) as after:
                missed = get_json(f"{base_url}/runs/{run.pk}/metrics.json?after={last_seen}", cookie)
                assert [p["seq"] for p in missed["points"]] == list(range(last_seen + 1, stored_while_down + 1))
                stored = StepMetric.objects.filter(run=run, seq__gt=last_seen).order_by("seq")
                assert [(p["step"], p["metrics"]) for p in missed["points"]] == [(m.step, m.metrics) for m in stored]

                step_gate.allow(REDIS_RUN_STEPS)
                notices = []
                while not notices or notices[-1]["type"] != "status":
                    notices.append(receive_json(after, timeout_s=120))
            # Notices arrive again, from the next seq on: the chart has no hole and no repeat.
            assert [(n["type"], n["seq"]) for n in notices[:-1]] == [
                ("step", seq) for seq in range(stored_while_down + 1, REDIS_RUN_STEPS + 1)]
            assert notices[-1]["state"] == Run.State.SUCCEEDED and notices[-1]["current_step"] == REDIS_RUN_STEPS

            run = wait_for_state(run, TERMINAL, log=log)
            assert run.state == Run.State.SUCCEEDED, run.error
            assert_every_step_stored_once(run, REDIS_RUN_STEPS)
            # The worker outlived its broker: it reconnected and takes new tasks.
            assert worker.poll() is None
            # A client of its own: this test's app subscribed to its results before Redis died, and
            # Celery's result consumer can miss a result published while it re-subscribes.
            assert celery_app_for(redis_url).send_task("workers.tasks.ping_task").get(timeout=60)["pid"] > 0
    finally:
        step_gate.allow(REDIS_RUN_STEPS)  # never leave a trainer waiting
        redis.stop()
        app.close()


