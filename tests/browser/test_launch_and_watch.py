"""The vertical slice in a real browser: launch the toy run from the form, watch its reward chart
grow without reloading (real Celery worker, real ASGI server and websocket), cancel it."""

import pytest

from webapp.runs.catalog import catalog_sync
from webapp.runs.models import Run, StepMetric

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def log_in(page, base_url, username, password):
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")


def points_in(page, chart_id: str) -> int:
    return int(page.get_attribute(f"#{chart_id}", "data-points") or 0)


def test_launch_watch_the_reward_chart_grow_then_cancel(page, screenshot, asgi_server, celery_worker_process,
                                                         make_user):
    catalog_sync()
    make_user("alice", password="a-long-test-password")
    log_in(page, asgi_server, "alice", "a-long-test-password")

    page.click("text=New run")
    page.wait_for_url(f"{asgi_server}/runs/new")
    assert page.input_value("#id_model") == "builtin:tiny"
    screenshot("launch-form")

    # An invalid value: the error shows beside its field and nothing is queued.
    page.fill("#id_group_size", "3")
    page.click("text=Launch run")
    assert "set rollouts_per_example (16) equal to group_size (3)" in page.inner_text("#error-rollouts_per_example")
    assert Run.objects.count() == 0
    screenshot("launch-form-error")

    page.fill("#id_group_size", "16")
    page.fill("#id_steps", "300")  # long enough to be cancelled mid-run
    page.fill("#id_checkpoint_every", "0")
    page.fill("#id_eval_every", "0")
    page.click("text=Launch run")
    page.wait_for_url(f"{asgi_server}/runs/*/")
    run = Run.objects.get()
    assert page.url.endswith(f"/runs/{run.pk}/")
    page.evaluate("window.__notReloaded = true")

    page.wait_for_function("() => Number(document.querySelector('#chart-reward')?.dataset.points || 0) >= 2",
                           timeout=180_000)
    first = points_in(page, "chart-reward")
    page.wait_for_function(f"() => Number(document.querySelector('#chart-reward').dataset.points) > {first}",
                           timeout=60_000)
    assert page.evaluate("window.__notReloaded") is True  # the points came live, not from a reload
    assert page.inner_text("#run-state") == "running"
    for chart in ("chart-loss", "chart-group_var", "chart-similarity", "chart-grad_norm", "chart-tokens_per_s"):
        assert points_in(page, chart) >= 1, chart
    screenshot("run-live")

    page.click("text=Cancel run")
    page.wait_for_function("() => document.querySelector('#run-state').textContent === 'cancelled'", timeout=120_000)
    run.refresh_from_db()
    assert run.state == Run.State.CANCELLED
    stored = StepMetric.objects.filter(run=run).count()
    assert 0 < stored < 300
    # Every stored step is drawn once, the last ones included (refetched after the final notice).
    page.wait_for_function(f"() => Number(document.querySelector('#chart-reward').dataset.points) === {stored}",
                           timeout=30_000)
    screenshot("run-cancelled")
