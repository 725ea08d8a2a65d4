"""The Credit section in a real browser: the run page loads it after it renders, its table holds the
numbers `run_credit` computes, its form reloads it for two other steps, and a bad pair of steps is
said in words (daphne serving the real ASGI app, MHGPO steps stored through the real ingest)."""

import pytest

from tests.browser.session import PASSWORD, log_in
from tests.webapp.runs.credit.builders import drifting_mhgpo_step, on_chain
from tests.webapp.runs.seeding import ingest, make_run
from webapp.runs.credit.report import run_credit
from webapp.runs.models import Run

NEUTRAL = ("the Credit section as a browser loads and draws it, compared with run_credit() on the same database; "
           "its aggregates are tested on both backends in tests/webapp/runs/credit/")
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL),
              pytest.mark.django_db(transaction=True)]


def test_the_run_page_loads_the_credit_and_compares_two_steps(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    run = on_chain(make_run(owner, state=Run.State.SUCCEEDED, config={"strategy": "mhgpo", "sampling": "fof"},
                            name="mhgpo chain"))
    ingest(run, [drifting_mhgpo_step(s, questions=4, group_size=3) for s in range(1, 13)])
    run.refresh_from_db()
    report = run_credit(run)
    log_in(page, asgi_server, "alice")

    page.goto(f"{asgi_server}/runs/{run.pk}/")
    page.wait_for_selector("#credit-section #credit-table")
    rows = page.locator("#credit-table tr.credit-row")
    assert rows.count() == 3
    shown = {rows.nth(i).get_attribute("data-module"): rows.nth(i).locator(".credit-share").inner_text()
             for i in range(3)}
    assert shown == {r.module: f"{r.share:.3f}" for r in report.summary}
    assert abs(sum(float(v) for v in shown.values()) - 1.0) < 0.002  # three rounded shares
    assert page.locator("#credit-chart polyline").count() >= 3
    assert "Change made from step 1 to step 12" in page.inner_text("#credit-change-steps")
    page.locator("#credit-section").scroll_into_view_if_needed()
    page.locator("#credit-section").screenshot(path="/tmp/credit-run-page.png")
    screenshot("credit-run-page")

    page.fill("#credit-steps input[name=from]", "2")
    page.fill("#credit-steps input[name=to]", "5")
    page.click("#credit-steps button")
    page.wait_for_selector("text=Change made from step 2 to step 5")
    expected = {r.module: f"{r.change.change:.3f}" for r in run_credit(run, from_step=2, to_step=5).summary}
    changes = {rows.nth(i).get_attribute("data-module"): rows.nth(i).locator(".credit-change").inner_text()
               for i in range(3)}
    assert changes == expected

    page.fill("#credit-steps input[name=from]", "5")
    page.fill("#credit-steps input[name=to]", "2")
    page.click("#credit-steps button")
    page.wait_for_selector("#credit-error")
    assert "'from' must be an earlier step than 'to'" in page.inner_text("#credit-error")

    page.goto(f"{asgi_server}/runs/{run.pk}/steps/4/")
    page.wait_for_selector("#credit-section #credit-table")
    assert "Change made from step 1 to step 4" in page.inner_text("#credit-change-steps")
    page.locator("#credit-section").screenshot(path="/tmp/credit-step-page.png")
