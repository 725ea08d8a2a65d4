"""One helper (static/js/axes.js) gives every chart a readable axis when its values are constant
(issue 27, item 3): the run page, compare, the example history, the group page and the heatmaps, in a
real browser. The case: an example seen once whose rollouts all got 0.56662966, which Plotly alone
draws with ticks at the value's last digits (a label cut to "56662966") and a single step with ticks
at 0.8, 1, 1.2."""

import pytest

from tests.browser.session import PASSWORD, log_in
from tests.suites import UI_ONLY
from tests.webapp.runs.seeding import constant_step_event, ingest, make_run
from webapp.runs.models import Group, Run

pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=UI_ONLY), pytest.mark.django_db(transaction=True)]

VALUE = 0.56662966


def ticks(page, selector, axis="ytick"):
    return page.eval_on_selector_all(f"{selector} .{axis} text", "els => els.map((e) => e.textContent)")


def significant_digits(label: str) -> int:
    mantissa = label.replace("−", "-").lstrip("-").split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa.rstrip("0")) if mantissa else 1


def assert_readable(page, selector, *, axis="yaxis", around=VALUE):
    """The axis' range holds the value with room at its own magnitude, and its tick labels are distinct
    round numbers (at most 3 significant digits), not the value's last digits."""
    low, high = page.evaluate(f"document.querySelector('{selector}')._fullLayout.{axis}.range")
    assert low < around < high and high - low >= abs(around) * 0.5, (low, high)
    labels = ticks(page, selector, "ytick" if axis.startswith("y") else "xtick")
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    assert all(significant_digits(label) <= 3 for label in labels), labels


def assert_one_step(page, selector, step=1):
    """A single step: whole-number ticks around it (not 0.8, 1, 1.2)."""
    low, high = page.evaluate(f"document.querySelector('{selector}')._fullLayout.xaxis.range")
    assert low < step < high
    labels = ticks(page, selector, "xtick")
    assert labels and all(label.lstrip("−-").isdigit() for label in labels), labels


def seeded(owner, name):
    run = make_run(owner, state=Run.State.SUCCEEDED, name=name, config={"strategy": "grpo"})
    ingest(run, [constant_step_event(1, extra={"lr": 1e-5, "kl": 0.0})])
    return run


def test_constant_values_read_on_every_chart(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    run, twin = seeded(owner, "constant"), seeded(owner, "constant twin")
    log_in(page, asgi_server, "alice")

    # The run page: the reward line and the constant learning rate at their own magnitude, one step.
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    page.wait_for_function("() => document.querySelector('#chart-reward')?.dataset.points === '1'")
    assert_readable(page, "#chart-reward")
    assert_one_step(page, "#chart-reward")
    assert_readable(page, "#chart-lr", around=1e-5)
    # The group-variance heatmap: every cell 0, a color scale from 0 to 1 (not a single color value).
    page.wait_for_function("() => document.querySelector('#heatmap-group_var')?.dataset.columns === '1'")
    z = page.evaluate("document.querySelector('#heatmap-group_var').data[0]")
    assert (z["zmin"], z["zmax"]) == (0, 1)
    assert_one_step(page, "#heatmap-group_var")
    screenshot("axes-run-page")

    # Compare: the same constant in two runs.
    # band=none: the twin's settings equal the run's, which the page would otherwise draw as one group.
    page.goto(f"{asgi_server}/runs/compare?runs={run.pk}&runs={twin.pk}&metrics=reward/mean&band=none")
    page.wait_for_selector("#compare-reward-mean[data-traces='2']")
    assert_readable(page, "#compare-reward-mean")
    assert_one_step(page, "#compare-reward-mean")
    screenshot("axes-compare")

    # The example's history: seen once, every rollout 0.56662966.
    page.goto(f"{asgi_server}/runs/{run.pk}/examples/q-constant/")
    page.wait_for_selector("#reward-chart[data-drawn='1']")
    assert_readable(page, "#reward-chart")
    assert_one_step(page, "#reward-chart")
    assert "56662966" not in " ".join(ticks(page, "#reward-chart"))
    page.wait_for_selector("#group-chart[data-drawn='1']")
    low, high = page.evaluate("document.querySelector('#group-chart')._fullLayout.yaxis.range")
    assert (low, high) == (0, 1)  # a variance of 0 everywhere, drawn from 0 up
    screenshot("axes-example-history")

    # The group page: every advantage 0 (no reward variance in the group).
    group = Group.objects.get(run=run)
    page.goto(f"{asgi_server}/runs/{run.pk}/groups/{group.pk}/")
    page.wait_for_selector("#advantage-chart[data-drawn='1']")
    low, high = page.evaluate("document.querySelector('#advantage-chart')._fullLayout.yaxis.range")
    assert (low, high) == (-1, 1)
    assert set(ticks(page, "#advantage-chart")) <= {"−1", "−0.5", "0", "0.5", "1"}
    screenshot("axes-group")
