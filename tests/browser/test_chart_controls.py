"""The chart toolbar (smoothing, log y, x axis), synced hover, remembered legend choices, full-width
charts, the System section and small-value ticks, in a real browser (daphne serving the real ASGI
app, data stored through the real ingest service)."""

import datetime
import math

import pytest

from tests.browser.session import PASSWORD, log_in
from tests.webapp.runs.seeding import ingest, make_run
from webapp.prefs.models import UserPreference
from webapp.runs.models import Run, StepMetric

NEUTRAL = ("the chart toolbar's drawing in a real browser (smoothing, log y, x axis, synced hover, full "
           "width, remembered legend and settings); the series, wall-time and tokens-seen axes and the "
           "compare page's queries it draws from (KeyTransform, jsonb_object_keys on PostgreSQL) are tested "
           "on both backends in tests/webapp/runs/charts/test_series_views.py, the stored preferences (a JSON "
           "field) in tests/webapp/prefs/test_views.py")
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]

STEPS = 40
SECONDS_PER_STEP = 90


def events(steps, *, scale=1.0):
    for step in steps:
        wobble = math.sin(step * 1.7)  # noisy, so smoothing visibly changes the curve
        yield {"type": "step", "attempt": 1, "step": step, "metrics": {
            "reward/mean": scale * (0.3 + step / 100 + 0.2 * wobble), "reward/recall": 0.5 + 0.1 * wobble,
            "loss": 0.05 * wobble,  # crosses 0: a log axis cannot show it
            "lr": 0.002, "completion_tokens": 1000 + 10 * step,
            "system/gpu_mem_allocated_gb": 3.1, "system/gpu_mem_reserved_gb": 4.0 + step / 100,
            "system/gpu_mem_peak_gb": 3.6 + 0.1 * wobble, "system/gpu_util": 70 + 20 * wobble,
            "system/gpu_power_w": 300 + 50 * wobble, "system/rss_gb": 2.5 + step / 1000,
            "system/sample_s": 4.0 + wobble, "system/update_s": 1.5,
            # a two-process run (num_processes = 2) whose rank 1 samples slower
            "system/rank0/sample_s": 3.0, "system/rank0/update_s": 1.4,
            "system/rank1/sample_s": 4.0 + wobble, "system/rank1/update_s": 1.5,
        }}


def seeded_run(owner, name="controls", scale=1.0):
    run = make_run(owner, state=Run.State.SUCCEEDED, name=name)
    ingest(run, events(range(1, STEPS + 1), scale=scale))
    start = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)
    for step in range(1, STEPS + 1):
        StepMetric.objects.filter(run=run, step=step).update(
            created_at=start + datetime.timedelta(seconds=SECONDS_PER_STEP * (step - 1)))
    return run


def ema_reference(values, alpha):
    """TensorBoard's de-biased EMA: gaps stay gaps and do not reset the average."""
    out, s, n = [], 0.0, 0
    for v in values:
        if v is None:
            out.append(None)
            continue
        n += 1
        s = alpha * s + (1 - alpha) * v
        out.append(s / (1 - alpha ** n) if alpha > 0 else v)
    return out


def open_run(page, base_url, run):
    page.goto(f"{base_url}/runs/{run.pk}/")
    page.wait_for_selector("#chart-toolbar[data-ready='1']")
    page.wait_for_function(f"() => document.querySelector('#chart-reward')?.dataset.points === '{STEPS}'")


def traces(page, chart_id):
    return page.evaluate(f"""() => document.querySelector('#{chart_id}').data.map((t) => ({{
        name: t.name, x: t.x, y: t.y, opacity: t.opacity ?? 1, showlegend: t.showlegend, group: t.legendgroup,
        visible: t.visible ?? true, color: t.line && t.line.color }}))""")


def hover_text(page, chart_id):
    return page.evaluate(f"() => document.querySelector('#{chart_id} .hoverlayer').textContent")


def test_chart_controls_on_the_run_page(page, browser, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    run = seeded_run(owner)
    log_in(page, asgi_server, "alice")
    open_run(page, asgi_server, run)

    # The smoothing function the page uses matches the reference computation, gaps included.
    values = [0.5, None, 1.5, 0.2, 0.9, None, None, 2.0, 1.1, 0.0]
    for alpha in (0.0, 0.6, 0.95):
        got = page.evaluate("([v, a]) => window.cohortCharts.ema(v, a)", [values, alpha])
        want = ema_reference(values, alpha)
        assert [g is None for g in got] == [w is None for w in want]
        assert [g for g in got if g is not None] == pytest.approx([w for w in want if w is not None])

    # The System section: its own heading and charts for memory, utilisation, power, RSS, timings.
    assert page.is_visible("#section-system h2:has-text('System')")
    for chart in ("chart-system-memory", "chart-system-gpu_util", "chart-system-gpu_power_w", "chart-system-rss_gb",
                  "chart-system-time", "chart-system-ranks"):
        assert page.locator(f"#charts-system #{chart}").count() == 1, chart
    memory = {t["name"] for t in traces(page, "chart-system-memory")}
    assert memory == {"gpu_mem_allocated_gb", "gpu_mem_reserved_gb", "gpu_mem_peak_gb"}
    assert {t["name"] for t in traces(page, "chart-system-time")} == {"sample_s", "update_s"}
    assert {t["name"] for t in traces(page, "chart-system-ranks")} == {
        "rank 0 sampling", "rank 0 update", "rank 1 sampling", "rank 1 update"}
    assert page.locator("#section-learning [id^=chart-system]").count() == 0

    # A constant learning rate of 0.002 reads as itself on its axis.
    ticks = page.eval_on_selector_all("#chart-lr .ytick text", "els => els.map((e) => e.textContent)")
    assert "0.002" in ticks, ticks
    low, high = page.evaluate("document.querySelector('#chart-lr').layout.yaxis.range")
    assert 0 < low < 0.002 < high < 0.01
    page.locator("#chart-lr").scroll_into_view_if_needed()
    screenshot("chart-controls-lr-ticks")

    # Smoothing: each series gets a smoothed trace; the raw one stays, faint, in the same color.
    raw = traces(page, "chart-reward")
    assert [t["name"] for t in raw] == ["mean", "recall"]
    page.locator("#cc-smoothing").fill("0.8")
    page.wait_for_function("() => document.querySelector('#chart-reward').data.length === 4")
    smoothed = traces(page, "chart-reward")
    assert smoothed[0]["y"] == raw[0]["y"] and smoothed[0]["opacity"] == pytest.approx(0.25)
    assert smoothed[0]["showlegend"] is False and smoothed[2]["showlegend"] is True
    assert smoothed[2]["name"] == "mean" and smoothed[2]["group"] == smoothed[0]["group"] == "mean"
    assert smoothed[2]["color"] == smoothed[0]["color"]
    assert smoothed[2]["y"] == pytest.approx(ema_reference(raw[0]["y"], 0.8))
    assert smoothed[2]["y"] != pytest.approx(raw[0]["y"])
    assert page.inner_text("#cc-smoothing-value") == "0.80"
    screenshot("chart-controls-smoothed")

    # Log scale: y axes turn logarithmic; a chart with values <= 0 stays linear and says so.
    page.check("#cc-log")
    page.wait_for_function("() => document.querySelector('#chart-reward').layout.yaxis.type === 'log'")
    assert page.evaluate("document.querySelector('#chart-loss').layout.yaxis.type") == "linear"
    assert page.get_attribute("#chart-loss", "data-log-fallback") == "true"
    assert "values ≤ 0" in page.inner_text("#chart-loss")
    page.uncheck("#cc-log")
    page.wait_for_function("() => document.querySelector('#chart-reward').layout.yaxis.type === 'linear'")

    # X axis: wall time since the first step (minutes here: under two hours), then tokens seen.
    page.select_option("#cc-x", "time")
    page.wait_for_function("() => document.querySelector('#chart-reward').data[0].x[1] === 1.5")
    assert traces(page, "chart-reward")[0]["x"] == pytest.approx([1.5 * (s - 1) for s in range(1, STEPS + 1)])
    assert "wall time (minutes)" in page.inner_text("#chart-reward")
    page.select_option("#cc-x", "tokens")
    page.wait_for_function("() => document.querySelector('#chart-reward').data[0].x[0] === 1010")
    tokens = [sum(1000 + 10 * k for k in range(1, s + 1)) for s in range(1, STEPS + 1)]
    assert traces(page, "chart-reward")[0]["x"] == tokens
    page.select_option("#cc-x", "time")
    page.wait_for_function("() => document.querySelector('#chart-reward').data[0].x[1] === 1.5")

    # Hovering one chart shows the hover line on the others at the same x.
    page.locator("#chart-reward").scroll_into_view_if_needed()
    box = page.locator("#chart-reward .nsewdrag").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    page.wait_for_function("() => document.querySelector('#chart-reward .hoverlayer').textContent.length > 0")
    page.wait_for_function("() => document.querySelector('#chart-lr .hoverlayer').textContent.length > 0")
    assert "0.002" in hover_text(page, "chart-lr")
    assert hover_text(page, "chart-system-rss_gb")
    screenshot("chart-controls-hover")
    page.mouse.move(5, 5)
    page.wait_for_function("() => document.querySelector('#chart-lr .hoverlayer').textContent === ''")

    # Full width: the button spans the chart over the grid; Esc restores it.
    narrow = page.locator("#chart-reward").bounding_box()["width"]
    page.click("#chart-reward .chart-expand")
    page.wait_for_selector("#chart-reward.chart-wide")
    page.wait_for_function("() => document.querySelector('#chart-reward')._fullLayout.height === 520")
    wide = page.locator("#chart-reward").bounding_box()
    grid = page.locator("#charts").bounding_box()
    assert wide["width"] > 1.5 * narrow and wide["width"] == pytest.approx(grid["width"], abs=4)
    page.wait_for_function("() => document.querySelector('#chart-reward .main-svg').getBoundingClientRect().width"
                           " > 0.9 * document.querySelector('#charts').getBoundingClientRect().width")
    screenshot("chart-controls-wide")
    page.keyboard.press("Escape")
    page.wait_for_function("() => !document.querySelector('#chart-reward').classList.contains('chart-wide')")
    page.wait_for_function("() => document.querySelector('#chart-reward')._fullLayout.height === 260")
    page.wait_for_function("() => document.querySelector('#chart-reward .main-svg').getBoundingClientRect().width"
                           " < 0.6 * document.querySelector('#charts').getBoundingClientRect().width")

    # Hiding a legend entry is remembered for this user: after a reload, and in another browser.
    page.locator("#chart-reward .legend .traces", has_text="recall").click()
    page.wait_for_function("() => document.querySelector('#chart-reward').data[1].visible === 'legendonly'")
    page.wait_for_selector("body[data-legend-saved='1']")
    pref = UserPreference.objects.get(user=owner, key="legend").value
    assert pref["reward"] == {"mean": True, "recall": False}
    # Each setting change is written a moment after it; wait for the write of the last one, not any.
    page.wait_for_function("() => { const v = JSON.parse(document.body.dataset.chartsSavedValue || '{}').run || {};"
                           " return v.smoothing === 0.8 && v.log === false && v.x === 'time'; }")
    page.reload()
    open_run(page, asgi_server, run)
    after = traces(page, "chart-reward")
    assert after[1]["visible"] == "legendonly" and after[3]["visible"] == "legendonly"  # raw and smoothed
    assert after[0]["visible"] is True
    assert page.evaluate("window.cohortCharts.view") == {"smoothing": 0.8, "log": False, "x": "time"}
    screenshot("chart-controls-reloaded")

    other = browser.new_context(viewport={"width": 1360, "height": 900})
    try:
        fresh = other.new_page()
        log_in(fresh, asgi_server, "alice")
        open_run(fresh, asgi_server, run)
        assert traces(fresh, "chart-reward")[1]["visible"] == "legendonly"
        assert fresh.input_value("#cc-x") == "time"
        # Showing it again is remembered too.
        fresh.locator("#chart-reward .legend .traces", has_text="recall").click()
        fresh.wait_for_function("() => document.querySelector('#chart-reward').data[1].visible === true")
        fresh.wait_for_selector("body[data-legend-saved='1']")
        assert UserPreference.objects.get(user=owner, key="legend").value["reward"]["recall"] is True
    finally:
        other.close()

    # Another user's page is not affected by alice's choices.
    make_user("bob", password=PASSWORD, staff=True)
    second = browser.new_context(viewport={"width": 1360, "height": 900})
    try:
        bob = second.new_page()
        log_in(bob, asgi_server, "bob")
        open_run(bob, asgi_server, run)
        assert bob.evaluate("window.cohortCharts.view") == {"smoothing": 0, "log": False, "x": "step"}
        assert len(traces(bob, "chart-reward")) == 2
    finally:
        second.close()


def test_smoothing_on_the_compare_page(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    a = seeded_run(owner, name="first")
    b = seeded_run(owner, name="second", scale=0.5)
    log_in(page, asgi_server, "alice")
    # band=none: the two runs (equal settings) drawn each on its own, not as one group of seeds.
    page.goto(f"{asgi_server}/runs/compare?runs={a.pk}&runs={b.pk}&metrics=reward/mean&metrics=lr&band=none")
    page.wait_for_selector("#compare-reward-mean[data-traces='2']")
    page.wait_for_selector("#chart-toolbar[data-ready='1']")
    raw = traces(page, "compare-reward-mean")
    assert [t["name"] for t in raw] == ["first", "second"]
    page.locator("#cc-smoothing").fill("0.7")
    page.wait_for_function("() => document.querySelector('#compare-reward-mean').data.length === 4")
    smoothed = traces(page, "compare-reward-mean")
    assert smoothed[0]["opacity"] == pytest.approx(0.25)
    for i in (0, 1):
        assert smoothed[2 + i]["y"] == pytest.approx(ema_reference(raw[i]["y"], 0.7))
    ticks = page.eval_on_selector_all("#compare-lr .ytick text", "els => els.map((e) => e.textContent)")
    assert "0.002" in ticks, ticks
    # Wall time per run, from each run's own first step.
    page.select_option("#cc-x", "time")
    page.wait_for_function("() => document.querySelector('#compare-reward-mean').data[1].x[1] === 1.5")
    # Hover syncs on this page too.
    box = page.locator("#compare-reward-mean .nsewdrag").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.4, box["y"] + box["height"] * 0.5)
    page.wait_for_function("() => document.querySelector('#compare-lr .hoverlayer').textContent.length > 0")
    screenshot("compare-smoothed")
