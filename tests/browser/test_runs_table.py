"""The runs table in a real browser: tag runs through the inline editor, sort by a column, search by
config value and by tag, select two runs and compare them (daphne serving the real ASGI app)."""

import math

import pytest

from tests.browser.session import PASSWORD, log_in
from tests.webapp.runs.seeding import ingest, make_run
from webapp.runs.models import Run

NEUTRAL = ("the runs table's inline editor, sort links, search box, selection and the archive and delete "
           "dialogs in a real browser; the config-value and tag search, the sorting, labels, archive and "
           "delete queries behind them are tested on both backends in tests/webapp/runs/table/test_views.py")
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def steps(count: int, *, scale: float):
    for step in range(1, count + 1):
        yield {"type": "step", "attempt": 1, "step": step,
               "metrics": {"reward/mean": scale * (1 - math.exp(-step / 10)), "kl": step / 1000}}


def row_names(page) -> list[str]:
    return page.locator("#runs-table tbody a.run-link").all_inner_texts()


def test_tag_sort_search_and_compare(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    runs = {
        "grpo baseline": make_run(owner, name="grpo baseline", state=Run.State.SUCCEEDED,
                                  config={"strategy": "grpo", "estimator": "grpo", "learning_rate": 1e-5}),
        "gdpo two rewards": make_run(owner, name="gdpo two rewards", state=Run.State.SUCCEEDED,
                                     config={"strategy": "grpo", "estimator": "gdpo", "learning_rate": 1e-5}),
        "mhgpo fork": make_run(owner, name="mhgpo fork", state=Run.State.FAILED,
                               config={"strategy": "mhgpo", "estimator": "grpo", "learning_rate": 3e-5}),
    }
    for run, scale in zip(runs.values(), (0.5, 0.9, 0.3), strict=True):
        ingest(run, steps(30, scale=scale))
    log_in(page, asgi_server, "alice")

    # Tag two runs through the inline editor of their rows.
    for name, tags in (("grpo baseline", "baseline, paper"), ("gdpo two rewards", "paper, gdpo-sweep")):
        row = page.locator("#runs-table tbody tr", has_text=name)
        row.hover()
        row.locator("a.row-edit-link").click()
        page.wait_for_selector("#row-editor:not([hidden])")
        page.fill("#row-editor-tags", tags)
        if name == "gdpo two rewards":
            page.fill("#row-editor-notes", "two rewards, decoupled normalization")
            screenshot("runs-table-inline-edit")
        page.click("#row-editor button[type=submit]")
        page.wait_for_selector(f"#runs-table tbody tr:has-text('{name}') a.tag")
    assert Run.objects.get(name="grpo baseline").tags == ["baseline", "paper"]
    assert Run.objects.get(name="gdpo two rewards").notes == "two rewards, decoupled normalization"

    # The run page shows them and edits them too.
    page.goto(f"{asgi_server}/runs/{runs['gdpo two rewards'].pk}/")
    assert page.locator("#run-tags a.tag").all_inner_texts() == ["paper", "gdpo-sweep"]
    page.click("#run-edit summary")
    page.fill(f"#name-{runs['gdpo two rewards'].pk}", "gdpo two rewards (v2)")
    screenshot("run-page-edit")
    page.click("#run-edit button[type=submit]")
    page.wait_for_selector("h1:has-text('gdpo two rewards (v2)')")
    Run.objects.filter(pk=runs["gdpo two rewards"].pk).update(name="gdpo two rewards")
    page.goto(f"{asgi_server}/")

    # Sort by best reward (high to low first), then the other way.
    page.click("#runs-table th a[data-sort-key=best_reward]")
    page.wait_for_url("**sort=-best_reward**")
    assert row_names(page) == ["gdpo two rewards", "grpo baseline", "mhgpo fork"]
    assert "▼" in page.inner_text("#runs-table th[aria-sort=descending]")
    page.click("#runs-table th a[data-sort-key=best_reward]")
    page.wait_for_url("**sort=best_reward**")
    assert row_names(page) == ["mhgpo fork", "grpo baseline", "gdpo two rewards"]

    # Search by a config value, then by a tag (a tag chip is a link to that search).
    page.fill("#runs-search", "estimator=gdpo")
    page.press("#runs-search", "Enter")
    page.wait_for_url("**q=estimator**")
    assert row_names(page) == ["gdpo two rewards"]
    page.click("#runs-table a.tag:text-is('gdpo-sweep')")
    page.wait_for_url("**q=tag**")
    assert row_names(page) == ["gdpo two rewards"]
    page.fill("#runs-search", "tag:paper")
    page.press("#runs-search", "Enter")
    page.wait_for_function("() => document.querySelectorAll('#runs-table tbody tr').length === 2")
    assert sorted(row_names(page)) == ["gdpo two rewards", "grpo baseline"]

    # A bad search says why, next to the box.
    page.fill("#runs-search", "no_such_key=1")
    page.press("#runs-search", "Enter")
    page.wait_for_selector("#filter-errors")
    assert "Unknown config key" in page.inner_text("#filter-errors")

    # Select the two tagged runs and compare them.
    page.goto(f"{asgi_server}/?q=tag:paper&sort=-best_reward")
    for name in ("grpo baseline", "gdpo two rewards"):
        page.locator("#runs-table tbody tr", has_text=name).locator("input[name=runs]").check()
    assert page.inner_text("#selection-count") == "2 selected"
    screenshot("runs-table")
    page.click("#compare-runs button:text-is('Compare')")
    page.wait_for_url(f"{asgi_server}/runs/compare*")
    page.wait_for_selector("#compare-reward-mean[data-traces='2']")
    assert "estimator" in page.inner_text("#config-diff")
    screenshot("runs-table-compare")


def test_archive_and_delete_from_the_table(page, screenshot, asgi_server, make_user):
    owner = make_user("bob", password=PASSWORD)
    keep = make_run(owner, name="keeper", state=Run.State.SUCCEEDED)
    old = make_run(owner, name="old try", state=Run.State.FAILED)
    busy = make_run(owner, name="still running", state=Run.State.RUNNING)
    log_in(page, asgi_server, "bob")
    page.locator("#runs-table tbody tr", has_text="old try").locator("input[name=runs]").check()
    page.click("#compare-runs button[value=archive]")
    page.click("#confirm-action")
    page.wait_for_selector(".messages li.success")
    assert "old try" not in row_names(page)
    page.check("#show-archived")
    page.click("#runs-filters button[type=submit]")
    page.wait_for_selector("#runs-table tr.archived")

    for run in (old, busy):
        page.locator(f"#runs-table tbody tr[data-run='{run.pk}'] input[name=runs]").check()
    page.click("#compare-runs button[value=delete]")
    page.wait_for_selector("#active-refusal")
    assert page.is_disabled("#confirm-action")
    screenshot("runs-table-delete-refused")
    page.goto(f"{asgi_server}/?archived=on")
    page.locator(f"#runs-table tbody tr[data-run='{old.pk}'] input[name=runs]").check()
    page.click("#compare-runs button[value=delete]")
    page.click("#confirm-action")
    page.wait_for_selector(".messages li.success")
    assert "Deleted 1 run" in page.inner_text(".messages")
    assert set(Run.objects.values_list("pk", flat=True)) == {keep.pk, busy.pk}
