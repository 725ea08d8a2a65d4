"""The run page in sections (issue 27, item 2), in a real browser against the real ASGI app: each chart
in its section, sections that fold with the fold state remembered per user, charts pinned to the top
(remembered too), and charts that are 0 on every step drawn small with a note, growing back to a full
panel when a live step brings a value."""

import math

import pytest

from tests.browser.session import PASSWORD, log_in, off_playwright_thread
from tests.suites import UI_ONLY
from tests.webapp.runs.seeding import ingest, make_run
from webapp.prefs.models import UserPreference
from webapp.runs.ingest.store import step_events_ingest
from webapp.runs.models import Run

pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=UI_ONLY), pytest.mark.django_db(transaction=True)]

STEPS = 12
SECTION_OF = {  # chart id -> the section it belongs in
    "chart-reward": "learning", "chart-eval-reward": "learning", "chart-parse_ok": "learning",
    "chart-group_var": "groups", "chart-zero_var_share": "groups",
    "chart-loss": "optimization", "chart-kl": "optimization", "chart-clip_fraction": "optimization",
    "chart-grad_norm": "optimization", "chart-lr": "optimization",
    "chart-completion_tokens": "sampling", "chart-truncated": "sampling",
    "chart-my_metric": "other", "chart-system-rss_gb": "system",
    "chart-pipeline-wait": "pipeline", "chart-pipeline-staleness": "pipeline",
}
FLAT = {"chart-kl": "optimization", "chart-clip_fraction": "optimization", "chart-truncated": "sampling"}


def step_event(step, *, kl=0.0):
    wobble = math.sin(step * 1.3)
    metrics = {
        "reward/mean": 0.3 + step / 40 + 0.1 * wobble, "reward/format": 0.5 + 0.2 * wobble,
        "parse_ok/answer": 0.9, "group_var/answer": 0.05 + 0.01 * wobble, "zero_var_share": 0.25 + 0.1 * wobble,
        "loss": 0.02 * wobble, "kl": kl, "clip_fraction": 0.0, "grad_norm": 1.0 + 0.3 * wobble, "lr": 1e-5,
        "completion_tokens": 800 + 5 * step, "truncated": 0, "my_metric": step, "system/rss_gb": 2.0 + step / 100,
        "pipeline/trainer_wait_share": 0.6 + 0.1 * wobble, "pipeline/sampler_wait_share": 0.4 - 0.1 * wobble,
        "pipeline/staleness/mean": step % 2, "pipeline/staleness/max": 1,
    }
    if step % 4 == 0:
        metrics["eval/reward/mean"] = 0.4 + step / 50
    return {"type": "step", "attempt": 1, "step": step, "metrics": metrics}


def section_of(page, chart_id):
    return page.evaluate(f"document.getElementById('{chart_id}').closest('.chart-section').id")


def open_run(page, base_url, run):
    page.goto(f"{base_url}/runs/{run.pk}/")
    page.wait_for_selector("#charts[data-layout-ready='1']")
    page.wait_for_function(f"() => document.querySelector('#chart-reward')?.dataset.points === '{STEPS}'")


def layout_pref(user):
    return UserPreference.objects.get(user=user, key="run-layout").value


def test_sections_fold_pin_and_flat_charts(page, screenshot, asgi_server, make_user):
    alice = make_user("alice", password=PASSWORD)
    run = make_run(alice, state=Run.State.RUNNING, name="sections")
    ingest(run, (step_event(s) for s in range(1, STEPS + 1)))
    log_in(page, asgi_server, "alice")
    open_run(page, asgi_server, run)

    # Every chart in its section, in the page's order of sections; the pinned strip is empty and hidden.
    for chart_id, section in SECTION_OF.items():
        expected = f"section-{section}"
        page.wait_for_function(f"() => document.getElementById('{chart_id}')?.closest('.chart-section')?.id === '{expected}'")
    order = page.eval_on_selector_all(".chart-section:not([hidden])", "els => els.map((e) => e.id)")
    assert order == ["section-learning", "section-groups", "section-optimization", "section-sampling",
                     "section-pipeline", "section-other", "section-system"]
    # Both sides' waits are one chart, one trace each.
    assert page.evaluate("document.getElementById('chart-pipeline-wait').data.map((t) => t.name).sort()") == [
        "sampler", "trainer"]
    assert page.is_hidden("#section-pinned")

    # Charts that are 0 on every step: small, in their section's strip, with the note; the others in full.
    for chart_id, section in FLAT.items():
        assert page.evaluate(f"document.getElementById('{chart_id}').parentElement.id") == f"flat-{section}"
        assert page.get_attribute(f"#{chart_id}", "data-compact") == "true"
        assert page.evaluate(f"document.getElementById('{chart_id}')._fullLayout.height") == 96
        assert "0 on every step" in page.inner_text(f"#{chart_id}")
    for chart_id in ("chart-loss", "chart-lr", "chart-reward"):
        assert page.get_attribute(f"#{chart_id}", "data-compact") == "false"
        assert page.evaluate(f"document.getElementById('{chart_id}')._fullLayout.height") == 260
    assert "2 charts at 0 on every step" in page.inner_text("#section-optimization > summary")
    assert "1 chart at 0 on every step" in page.inner_text("#section-sampling > summary")
    screenshot("run-page-sections")

    # Folding a section is remembered for this user, and applies on the next visit.
    page.click("#section-system > summary")
    page.wait_for_function("() => !document.getElementById('section-system').open")
    page.wait_for_function("() => JSON.parse(document.body.dataset.layoutSavedValue || '{}').sections?.system === false")
    assert layout_pref(alice)["sections"] == {"system": False}

    # Pinning: the chart moves to the pinned strip at the top, in pin order, small charts stay small.
    page.click("#chart-grad_norm .chart-pin")
    page.click("#chart-kl .chart-pin")
    page.wait_for_function("() => document.querySelectorAll('#charts-pinned > .chart').length === 2")
    assert page.eval_on_selector_all("#charts-pinned > .chart", "els => els.map((e) => e.id)") == [
        "chart-grad_norm", "chart-kl"]
    assert page.is_visible("#section-pinned")
    first = page.eval_on_selector_all(".chart-section:not([hidden])", "els => els.map((e) => e.id)")[0]
    assert first == "section-pinned"
    assert page.get_attribute("#chart-kl", "data-compact") == "true"
    assert page.inner_text("#chart-grad_norm .chart-pin") == "Unpin"
    # Two clicks may be one write or two (a write waits for a pause): wait for the one holding both pins.
    page.wait_for_function("() => JSON.parse(document.body.dataset.layoutSavedValue || '{}').pinned?.length === 2")
    page.wait_for_function("() => document.querySelector('#chart-grad_norm .main-svg').getBoundingClientRect().width > 500")
    screenshot("run-page-pinned")

    # A fresh visit: the fold state and the pins as the user left them.
    assert layout_pref(alice)["pinned"] == ["grad_norm", "kl"]
    open_run(page, asgi_server, run)
    assert page.evaluate("document.getElementById('section-system').open") is False
    assert page.evaluate("document.getElementById('section-learning').open") is True
    page.wait_for_function("() => document.querySelectorAll('#charts-pinned > .chart').length === 2")
    assert page.eval_on_selector_all("#charts-pinned > .chart", "els => els.map((e) => e.id)") == [
        "chart-grad_norm", "chart-kl"]

    # Unpinning puts the chart back in its section; opening the folded section draws its charts in full.
    page.click("#chart-grad_norm .chart-pin")
    page.wait_for_function("() => document.getElementById('chart-grad_norm').parentElement.id === 'charts-optimization'")
    page.click("#section-system > summary")
    page.wait_for_function("() => document.querySelector('#chart-system-rss_gb .main-svg').getBoundingClientRect().width > 500")
    page.wait_for_function("() => JSON.parse(document.body.dataset.layoutSavedValue || '{}').sections?.system === true")
    assert layout_pref(alice) == {"sections": {"system": True}, "pinned": ["kl"]}

    # A live step with a KL value: the small chart grows back into a full panel (in the pinned strip,
    # where the user put it); the clip fraction, still 0 everywhere, stays small.
    page.wait_for_function("document.getElementById('live-status').textContent === 'Live.'")
    off_playwright_thread(lambda: step_events_ingest(run, [step_event(STEPS + 1, kl=0.004)]))
    page.wait_for_function("() => document.getElementById('chart-kl').dataset.compact === 'false'")
    page.wait_for_function("() => document.getElementById('chart-kl')._fullLayout.height === 260")
    assert not page.is_visible("#chart-kl .annotation-text:has-text('0 on every step')")
    assert page.get_attribute("#chart-clip_fraction", "data-compact") == "true"
    page.click("#chart-kl .chart-pin")
    page.wait_for_function("() => document.getElementById('chart-kl').parentElement.id === 'charts-optimization'")
    screenshot("run-page-live-unflat")


def test_a_flat_chart_opened_full_width_is_drawn_in_full(page, asgi_server, make_user):
    bob = make_user("bob", password=PASSWORD)
    run = make_run(bob, state=Run.State.SUCCEEDED, name="flat")
    ingest(run, (step_event(s) for s in range(1, STEPS + 1)))
    log_in(page, asgi_server, "bob")
    open_run(page, asgi_server, run)
    page.click("#chart-kl .chart-expand")
    page.wait_for_function("() => document.getElementById('chart-kl')._fullLayout.height === 520")
    assert page.get_attribute("#chart-kl", "data-compact") == "false"
    assert page.evaluate("document.getElementById('chart-kl').parentElement.id") == "charts-optimization"
    page.keyboard.press("Escape")
    page.wait_for_function("() => document.getElementById('chart-kl')._fullLayout.height === 96")
    assert page.evaluate("document.getElementById('chart-kl').parentElement.id") == "flat-optimization"
