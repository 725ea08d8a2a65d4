"""Where two runs part in a real browser (daphne serving the real ASGI app, runs stored through the real
ingest): from the compare page of two seed groups to the ranked table, its category filter, and one
example opened across the runs."""

import pytest

from tests.browser.session import PASSWORD, log_in, off_playwright_thread
from tests.webapp.runs.examples.partways_world import EXPECTED_CATEGORY, EXPECTED_ORDER, world

NEUTRAL = ("the part-ways table, its counts, filter and links as drawn in a real browser; its aggregate is tested "
           "on both backends in tests/webapp/runs/examples/test_partways.py, the page's and the compare page's "
           "views in tests/webapp/runs/examples/test_partways_views.py")
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL),
              pytest.mark.django_db(transaction=True)]


def test_from_compare_to_where_the_runs_part_and_one_example_across(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    made = []
    off_playwright_thread(lambda: made.extend(world(owner)))  # the ingest's websocket notices need their own thread
    gdpo, grpo = made
    runs = [*gdpo, *grpo]
    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/compare?" + "&".join(f"runs={r.pk}" for r in runs))
    page.wait_for_selector("#partways-link")
    assert "3 runs against 3, each side averaged" in page.inner_text("#compare-examples")
    page.click("#partways-link")
    page.wait_for_selector("#partways tbody tr.example")

    order = page.eval_on_selector_all("#partways tr.example", "rs => rs.map(r => r.dataset.example)")
    assert order == EXPECTED_ORDER  # the examples the GDPO seeds learned and GRPO's did not come first
    categories = page.eval_on_selector_all("#partways tr.example", "rs => rs.map(r => r.dataset.category)")
    assert dict(zip(order, categories, strict=True)) == EXPECTED_CATEGORY
    counts = page.eval_on_selector_all("#partways-counts .count",
                                       "bs => Object.fromEntries(bs.map(b => [b.dataset.kind, b.textContent]))")
    assert counts == {"learned_a": "4", "learned_b": "1", "lost_a": "0", "lost_b": "1", "solved_both": "1",
                      "unsolved_both": "1", "only_a": "1", "only_b": "0"}
    first = page.locator("#partways tr.example").first.locator("td").all_inner_texts()
    assert first[:4] == ["1", "e1", "Learned by A, not by B", "1.00"]
    assert first[4] == "0.00 → 1.00" and first[6] == "7" and first[8] == "0.00 → 0.00" and first[10] == "never"
    assert "gdpo seed 0" in page.inner_text("#side-a") and "grpo seed 2" in page.inner_text("#side-b")
    # Readable at the page's width: the table fits the viewport, no column pushed off-screen.
    width = page.evaluate("() => document.querySelector('#partways').getBoundingClientRect().right")
    assert width <= 1360
    screenshot("examples-partways")

    page.click("#partways-counts a[data-kind='learned_a']")
    page.wait_for_url("**kind=learned_a**")
    assert page.eval_on_selector_all("#partways tr.example", "rs => rs.map(r => r.dataset.example)") == \
        ["e1", "e2", "e3", "e8"]

    page.locator("#partways tr.example[data-example='e8'] a.across-link").click()
    page.wait_for_url("**/runs/examples/across?**")
    page.wait_for_selector("#across")
    heads = page.eval_on_selector_all("#across th.column-head", "hs => hs.map(h => Number(h.dataset.run))")
    assert heads == [r.pk for r in runs]  # every run of both sides, a column each
    assert "Example e8 across runs" in page.inner_text("h1")
