"""One example across runs in a real browser (daphne serving the real ASGI app): two runs of a few
hundred steps, stored through the real ingest, opened from the example history's form; the columns,
the first right step, the word-level diffs and a horizontally scrolling table with monospace answers."""

import pytest

from tests.browser.session import PASSWORD, log_in
from tests.webapp.runs.examples.across_world import answers_event
from tests.webapp.runs.seeding import ingest, make_run
from webapp.runs.examples.across import Window, example_across
from webapp.runs.models import Run

NEUTRAL = ("the across-runs page as drawn in a real browser, compared with example_across() run by the test on "
           "the same database; the selector's queries are tested on both backends in "
           "tests/webapp/runs/examples/test_across.py and test_across_views.py")
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL),
              pytest.mark.django_db(transaction=True)]

STEPS = 300
EVERY = 3  # q1 is drawn every third step: 100 visits per run
LEARNS = {"gdpo": 120, "grpo": 210}  # the step from which each run answers q1 right


def events(name: str):
    learned_at = LEARNS[name]
    for step in range(1, STEPS + 1):
        answers = {"filler": [("x", f"filler {step}", 0.0), ("x", "filler", 0.0)]}
        if step % EVERY == 0:
            right = step >= learned_at
            total = "4" if right else str(step % 7 + 5)
            reason = ("two and two make four" if right else f"two plus two is about {step % 5}") + f" ({name})"
            answers["q1"] = [(reason, f"The answer is {total} I think", 1.0 if right else 0.25),
                             ("I guess", "no idea", 0.0), ("hmm", "maybe 3", 0.0), ("so", "it is 9", 0.0)]
        yield answers_event(step, answers)


def test_open_an_example_across_runs_from_its_history(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    runs = {}
    for name in ("gdpo", "grpo"):
        run = make_run(owner, state=Run.State.SUCCEEDED, name=name,
                       config={"strategy": "grpo", "padding": "fill", "rewards": [{"name": "correct", "weight": 1.0}]})
        Run.objects.filter(pk=run.pk).update(total_steps=STEPS)
        ingest(run, events(name))  # every step in one call: one transaction, bulk inserts
        runs[name] = Run.objects.get(pk=run.pk)
    a, b = runs["gdpo"], runs["grpo"]
    expected = example_across([a, b], [Window(a.pk), Window(b.pk)], "q1")
    assert [c.first_right for c in expected.columns] == [120, 210]
    log_in(page, asgi_server, "alice")

    page.goto(f"{asgi_server}/runs/{a.pk}/examples/q1/")
    page.wait_for_selector("#across-form")
    offered = page.locator("#across-form input[type=checkbox][name=runs]")
    assert offered.count() == 1 and offered.get_attribute("value") == str(b.pk) and offered.is_checked()
    assert "grpo" in page.inner_text("#across-form")
    screenshot("example-history-across-form")
    page.click("#across-open-button")
    page.wait_for_url(lambda url: url.startswith(f"{asgi_server}/runs/examples/across?"))
    page.wait_for_selector("#across")

    heads = page.locator("#across th.column-head")
    assert heads.count() == 2
    assert heads.nth(0).locator("a").first.inner_text() == "gdpo"
    assert [heads.nth(i).locator(".first-right").inner_text() for i in range(2)] == \
        ["first right at step 120", "first right at step 210"]
    rows = page.locator("#across tr.across-row")
    assert rows.count() == len(expected.rows) == STEPS // EVERY
    # The first right cell of each column is marked, and only that one.
    marks = page.eval_on_selector_all("td.first-right", "tds => tds.map(td => td.dataset.step)")
    assert sorted(int(s) for s in marks) == [120, 210]
    assert page.locator("td.first-right .first-right-mark").count() == 2
    # Word-level diffs against the previous visit: the changed number in <del>, its replacement in <ins>.
    cell = page.locator("tr.across-row:has(td[data-step='120']) td.cell").first
    answer = cell.locator(".answer[data-module='answer'] > pre.text")
    assert answer.locator("del").inner_text() == str(117 % 7 + 5) and answer.locator("ins").inner_text() == "4"
    assert page.locator("#across pre.text ins").count() > 100 and page.locator("#across pre.text del").count() > 100
    # Against the first column, in the same row: open the comparison.
    other = page.locator("tr.across-row:has(td[data-step='150']) td.cell").nth(1)
    other.locator(".answer[data-module='reason'] summary").click()
    versus = other.locator(".answer[data-module='reason'] details pre.text")
    assert versus.is_visible()
    assert versus.locator("ins").count() >= 1 and versus.locator("del").count() >= 1
    assert "(gdpo)" in versus.locator("del").all_inner_texts()[-1]
    # Readable: answers in a monospace font, wrapped; the table scrolls sideways when it is wider.
    font = page.eval_on_selector("#across pre.text", "p => getComputedStyle(p).fontFamily")
    assert "monospace" in font
    overflow = page.eval_on_selector(".across-wrap", "w => getComputedStyle(w).overflowX")
    assert overflow == "auto"
    page.set_viewport_size({"width": 700, "height": 900})
    scrolls = page.eval_on_selector(".across-wrap", "w => w.scrollWidth > w.clientWidth")
    assert scrolls
    page.set_viewport_size({"width": 1360, "height": 900})
    page.locator("td[data-step='120']").first.scroll_into_view_if_needed()
    screenshot("examples-across")

    # Aligned by fraction: one row per percent of the runs' steps, the same cells.
    page.select_option("#align", "fraction")
    page.click("#across-controls button[type=submit]")
    page.wait_for_url(lambda url: "align=fraction" in url)
    page.wait_for_selector("#across")
    first_key = page.locator("#across tr.across-row th.row-key").first.inner_text()
    assert first_key == "1%"
