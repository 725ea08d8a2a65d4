"""The run page of a long run in a real browser: every chart drawn (points on the page, not only a div),
no WebGL context lost, and a one-step spike kept by the server's thinning. Runs of 2,000 and 7,500
steps, stored through the real ingest (which writes their column blocks, webapp/runs/charts/blocks.py)."""

import math

import pytest

from tests.browser.session import PASSWORD, log_in
from tests.webapp.runs.seeding import ingest, make_run
from webapp.runs.models import Run

NEUTRAL = ("a long run's charts as a real browser draws them; the blocks and the thinning behind them are "
           "tested on both backends in tests/webapp/runs/charts/test_blocks.py and test_series_views.py")
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL),
              pytest.mark.django_db(transaction=True)]

SPIKE_STEP = 1234
MODULES = ("rewriter", "answerer")


def run_events(steps):
    """About thirty keys a step over the page's sections, the reward spiking once."""
    for step in steps:
        wave = math.sin(step / 150)
        metrics = {"reward/mean": wave + (40.0 if step == SPIKE_STEP else 0.0), "reward/char_f1": wave / 2,
                   "loss": 1 / step, "kl": 0.0, "grad_norm": 1 + wave, "lr": 1e-5, "clip_fraction": 0.0,
                   "mismatch/abs_logprob_diff": 1e-6, "completion_tokens": 100 + step % 7, "truncated": 0.0,
                   "failure_rate": (step % 10) / 10, "tokens_per_s": 5000.0 + wave, "time": 0.25,
                   "zero_var_share": (step % 4) / 4, "tokens/entropy/mean": 0.5 + wave / 10,
                   "system/rss_gb": 1.5, "system/sample_s": 0.1, "system/update_s": 0.15}
        for module in MODULES:
            metrics.update({f"format_penalty/{module}": 0.0, f"parse_ok/{module}": 1.0,
                            f"group_var/{module}": (step % 9) / 10, f"similarity/{module}": 0.4})
        yield {"type": "step", "attempt": 1, "step": step, "metrics": metrics}


DRAWN = """() => [...document.querySelectorAll('.managed-chart')].map((div) => {
  const shown = (div.data || []).filter((t) => t.visible !== 'legendonly');
  const lines = [...div.querySelectorAll('.scatterlayer .trace path.js-line')].filter((p) => (p.getAttribute('d') || '').length > 2);
  const markers = div.querySelectorAll('.scatterlayer .trace .points path').length;
  return {id: div.id, traces: shown.length, points: shown.reduce((n, t) => n + (t.x || []).length, 0),
          lines: lines.length, markers, webgl: div.querySelectorAll('canvas').length};
})"""


@pytest.mark.parametrize("steps", [2000, 7500])
def test_every_chart_of_a_long_run_is_drawn_without_webgl(page, screenshot, asgi_server, make_user, steps):
    owner = make_user("alice", password=PASSWORD)
    run = make_run(owner, state=Run.State.SUCCEEDED, name=f"{steps} steps")
    events = list(run_events(range(1, steps + 1)))
    for first in range(0, steps, 500):
        ingest(run, events[first:first + 500])
    warnings = []
    page.on("console", lambda message: warnings.append(message.text) if "WebGL" in message.text else None)
    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    page.wait_for_function("() => Number(document.querySelector('#chart-reward')?.dataset.points || 0) > 0")
    assert page.get_attribute("#chart-reward", "data-downsampled") == str(steps > 2000).lower()
    page.wait_for_function("() => document.querySelectorAll('.managed-chart').length >= 15")
    for section in page.locator("details.chart-section:not([open]) > summary").all():
        section.click()  # every section open, so every chart is on the page to count
    charts = page.evaluate(DRAWN)
    assert len(charts) >= 15
    for chart in charts:
        assert chart["traces"] > 0 and chart["points"] > 0, chart
        assert chart["lines"] + chart["markers"] > 0, f"{chart['id']} holds data but draws nothing"
        assert chart["webgl"] == 0, chart
    reward = next(c for c in charts if c["id"] == "chart-reward")
    assert reward["lines"] == reward["traces"]  # each series of the Reward chart is a drawn line
    assert not warnings, warnings  # no "Too many active WebGL contexts"
    xs, ys = page.evaluate("() => { const t = document.querySelector('#chart-reward').data"
                           ".find((t) => t.meta === 'reward/mean'); return [t.x, t.y]; }")
    assert len(xs) == min(steps, 2000)
    assert ys[xs.index(SPIKE_STEP)] == 40.0 + math.sin(SPIKE_STEP / 150)  # the spike survives the thinning
    page.locator("#chart-reward").scroll_into_view_if_needed()
    screenshot(f"run-page-{steps}-steps")
