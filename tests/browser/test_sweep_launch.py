"""The launch form's Sweep button in a real browser (static/js/launch-form.js, webapp/sweeps/forms.py): a
field's "sweep" toggle reveals its entry and opens the sweep's settings, the Sweep button lands on the
sweep's page, and a bad range comes back beside its field with what was typed."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.session import log_in
from tests.suites import UI_ONLY
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.models import Run, Task
from webapp.sweeps.models import Sweep

pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=UI_ONLY), pytest.mark.django_db(transaction=True)]


def open_form(page, base_url: str) -> None:
    task = Task.objects.get(name="toy")
    page.goto(f"{base_url}/runs/new?task={task.pk}")
    page.wait_for_selector("form.launch[data-sweep-ready]", state="attached")


def sweep_learning_rate(page, text: str) -> None:
    """Ticks learning_rate's "sweep" toggle and types `text` into the entry it reveals."""
    entry = page.locator("#id_sweep__learning_rate")
    group = page.locator("details.group", has=page.locator("#field-learning_rate"))
    if group.get_attribute("open") is None:  # "Optimization" starts folded, as a user finds it
        group.locator("summary").click()
    page.locator("#field-learning_rate").scroll_into_view_if_needed()
    expect(entry).to_be_hidden()
    page.check("#sweep-toggle-learning_rate")
    expect(entry).to_be_visible()
    expect(entry).to_have_attribute("placeholder", re.compile(r"1e-5\.\.1e-3 log"))
    expect(page.locator("#sweep-settings")).to_have_attribute("open", "")  # the settings unfold with it
    entry.fill(text)


def test_a_sweep_is_launched_from_the_form_and_a_bad_range_is_shown_beside_its_field(page, screenshot, asgi_server,
                                                                                       make_user):
    catalog_sync()
    make_user("alice", password="a-long-test-password")
    log_in(page, asgi_server, "alice")

    open_form(page, asgi_server)
    expect(page.locator("#sweep-settings")).not_to_have_attribute("open", "")  # folded until a field is swept
    sweep_learning_rate(page, "1e-3..1e-5 log")  # low above high
    page.click("#launch-sweep")
    page.wait_for_selector("#error-learning_rate")
    expect(page.locator("#error-learning_rate")).to_contain_text("must be below its high")
    expect(page.locator("#id_sweep__learning_rate")).to_be_visible()  # its entry stays on, with the text
    assert page.input_value("#id_sweep__learning_rate") == "1e-3..1e-5 log"
    assert page.is_checked("#sweep-toggle-learning_rate")
    assert not Sweep.objects.exists() and not Run.objects.exists()
    page.locator("#field-learning_rate").scroll_into_view_if_needed()
    screenshot("sweep-launch-bad-range")

    # A toggled-off entry is not posted: the sweep varies only what is ticked.
    open_form(page, asgi_server)
    page.locator("#field-group_size").scroll_into_view_if_needed()
    page.check("#sweep-toggle-group_size")
    page.fill("#id_sweep__group_size", "4, 8")
    page.uncheck("#sweep-toggle-group_size")
    expect(page.locator("#id_sweep__group_size")).to_be_hidden()
    sweep_learning_rate(page, "1e-5..1e-3 log")
    page.fill("#id_sweep_n_trials", "3")
    page.select_option("#id_sweep_pruner", "median")
    # (No full-page screenshot here: taking one just before the click made the click post nothing.)
    page.click("#launch-sweep")
    page.wait_for_url(re.compile(r".*/sweeps/\d+/$"))
    sweep = Sweep.objects.get()
    assert page.url.endswith(f"/sweeps/{sweep.pk}/")
    assert sweep.space == {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}}
    assert (sweep.n_trials, sweep.pruner, sweep.owner.username) == (3, "median", "alice")
    assert Run.objects.filter(sweep_member__trial__sweep=sweep).count() == sweep.trials.count() >= 1


def test_enter_in_a_sweep_entry_presses_sweep_not_launch_run(page, asgi_server, make_user):
    catalog_sync()
    make_user("alice", password="a-long-test-password")
    log_in(page, asgi_server, "alice")
    open_form(page, asgi_server)
    sweep_learning_rate(page, "1e-5, 1e-4")
    page.press("#id_sweep__learning_rate", "Enter")
    page.wait_for_url(re.compile(r".*/sweeps/\d+/$"))
    assert Sweep.objects.get().space == {"learning_rate": {"values": [1e-5, 1e-4]}}
