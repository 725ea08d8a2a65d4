"""The vertical slice in a real browser: launch the toy run from the form, watch its reward chart
grow without reloading (real Celery worker, real ASGI server and websocket), cancel it."""

import pytest

from tests.browser.session import log_in
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.models import Run, StepMetric

NEUTRAL = ("launching from the form, the reward chart growing live without a reload and the cancel button, "
           "in a real browser; a real worker's claim, the ingest of its steps while the page reads them and "
           "a cancel at a step boundary are tested on both backends in tests/workers/test_run_train.py, the "
           "ingest in tests/webapp/runs/ingest/test_store.py, the run's websocket in "
           "tests/webapp/runs/live/test_consumers.py")
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def points_in(page, chart_id: str) -> int:
    return int(page.get_attribute(f"#{chart_id}", "data-points") or 0)


def wait_for_points(page, chart_id: str, count: int, timeout_ms: int = 180_000) -> None:
    page.wait_for_function(f"() => Number(document.querySelector('#{chart_id}')?.dataset.points || 0) === {count}",
                           timeout=timeout_ms)


def test_launch_watch_the_reward_chart_grow_then_cancel(page, screenshot, asgi_server, celery_worker_process,
                                                         make_user, step_gate):
    catalog_sync()
    make_user("alice", password="a-long-test-password")
    log_in(page, asgi_server, "alice", "a-long-test-password")

    page.click("text=New run")
    page.wait_for_url(f"{asgi_server}/runs/new")
    assert page.input_value("#id_model") == "builtin:tiny"
    # A first launch sees task, strategy, estimator, batch shape and model; the rest is folded.
    assert page.is_visible("#id_strategy") and page.is_visible("#id_estimator") and page.is_visible("#id_steps")
    assert not page.is_visible("#id_learning_rate") and not page.is_visible("#id_lora_r")
    screenshot("launch-form")

    # An invalid value: the error shows beside its field and nothing is queued.
    page.fill("#id_group_size", "3")
    page.click("text=Launch run")
    assert "set rollouts_per_example (16) equal to group_size (3)" in page.inner_text("#error-rollouts_per_example")
    assert Run.objects.count() == 0
    screenshot("launch-form-error")

    # The test decides when steps happen (the trainer waits at its step gate): two, then two more.
    step_gate.allow(2)
    page.fill("#id_group_size", "16")
    page.fill("#id_steps", "300")
    page.click("summary:has-text('Evaluation, checkpoints, seed')")  # unfold the advanced group
    page.fill("#id_checkpoint_every", "0")
    page.fill("#id_eval_every", "0")
    page.click("text=Launch run")
    page.wait_for_url(f"{asgi_server}/runs/*/")
    run = Run.objects.get()
    assert page.url.endswith(f"/runs/{run.pk}/")
    page.evaluate("window.__notReloaded = true")

    wait_for_points(page, "chart-reward", 2)
    assert page.inner_text("#run-state") == "running"
    step_gate.allow(4)
    wait_for_points(page, "chart-reward", 4)
    assert page.evaluate("window.__notReloaded") is True  # the points came live, not from a reload
    # The summary follows the run: its best step reward so far, and no stale "queued" message.
    best = max(m.metrics["reward/mean"] for m in StepMetric.objects.filter(run=run))
    page.wait_for_function(f"() => document.querySelector('#run-best').textContent === '{best:.3f}'")
    assert page.locator(".messages li.run-queued").count() == 0
    # A constant small value reads as itself: the learning-rate axis is around 0.002, not -1..1.
    low, high = page.evaluate("document.querySelector('#chart-lr').layout.yaxis.range")
    assert 0 < low < run.config["learning_rate"] < high < 0.01
    assert page.inner_text("#run-state") == "running"
    for chart in ("chart-loss", "chart-group_var", "chart-similarity", "chart-grad_norm", "chart-tokens_per_s",
                  "chart-mismatch"):
        assert points_in(page, chart) >= 1, chart
    # The HF sampler is the training model: the sampler / trainer mismatch chart sits at about 0.
    mismatch = page.evaluate("""() => Object.fromEntries(document.querySelector('#chart-mismatch').data
                                   .map((t) => [t.name, Math.max(...t.y)]))""")
    assert set(mismatch) == {"abs_logprob_diff", "kl"} and max(mismatch.values()) < 1e-3
    screenshot("run-live")

    page.click("text=Cancel run")  # the trainer waits before step 5: the cancel stops it there
    page.wait_for_function("() => document.querySelector('#run-state').textContent === 'cancelled'", timeout=120_000)
    run.refresh_from_db()
    assert run.state == Run.State.CANCELLED and run.current_step == 4
    assert StepMetric.objects.filter(run=run).count() == 4
    # Every stored step is drawn once, the last ones included (refetched after the final notice).
    wait_for_points(page, "chart-reward", 4, timeout_ms=30_000)
    screenshot("run-cancelled")
