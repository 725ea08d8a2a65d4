"""Plugin programs in a real browser: after sync_programs the launch form offers the installed test
plugin's program and the DSPy program, and lists the broken plugin disabled, with its error."""

import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.browser.session import log_in
from webapp.runs.launch.catalog import catalog_sync

NEUTRAL = ("the launch form's program options (plugin programs, a broken plugin's disabled with its error) "
           "in a real browser; sync_programs and the options the form renders are tested on both backends in "
           "tests/webapp/runs/test_plugins.py")
pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def test_the_launch_form_offers_plugin_programs_and_shows_a_broken_one_disabled(
        page, screenshot, asgi_server, make_user, test_plugins):
    catalog_sync()
    make_user("alice", password="a-long-test-password")
    log_in(page, asgi_server, "alice", "a-long-test-password")
    page.goto(f"{asgi_server}/runs/new")

    options = page.eval_on_selector_all(
        "#id_program option", "els => els.map(e => ({value: e.value, text: e.textContent, disabled: e.disabled}))")
    by_value = {o["value"]: o for o in options}
    assert not by_value["demo_echo"]["disabled"] and not by_value["dspy_multihop"]["disabled"]
    broken = by_value["broken_program"]
    assert broken["disabled"] and "unavailable" in broken["text"] and "broken on purpose" in broken["text"]
    assert not by_value["toy"]["disabled"]  # the clash plugin's "toy" was refused; the built-in keeps it

    page.select_option("#id_program", "dspy_multihop")
    assert page.input_value("#id_program") == "dspy_multihop"
    # A disabled option cannot be chosen, so the broken program can never be launched from here.
    with pytest.raises(PlaywrightError):
        page.select_option("#id_program", "broken_program", timeout=2_000)
    page.eval_on_selector("#id_program", "el => el.size = el.options.length")  # show the list for the picture
    screenshot("launch-form-plugins")
