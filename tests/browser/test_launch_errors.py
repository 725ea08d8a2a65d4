"""A refused launch form says what happened, in a real browser (templates/runs/_error_summary.html,
static/js/launch-form.js): the summary at its top lists every refused field, the first one takes the
focus on load (it may be 1,000 px down), a summary link opens its field's folded group and focuses it;
and a staff launch over the launch limits asks "Launch anyway" before it queues anything. The HTTP
side is tests/webapp/runs/launch/test_error_summary.py."""

import pytest
from playwright.sync_api import expect

from tests.browser.session import log_in
from tests.suites import UI_ONLY
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.models import Run, Task

pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=UI_ONLY), pytest.mark.django_db(transaction=True)]


def open_form(page, base_url: str) -> None:
    page.goto(f"{base_url}/runs/new?task={Task.objects.get(name='toy').pk}")
    page.wait_for_selector("form.launch[data-conditions-ready]", state="attached")


def submit_refused(page) -> None:
    """Presses "Launch run" and waits for the refused form's script to have focused what to fix."""
    page.click("button.primary:has-text('Launch run')")
    page.wait_for_selector("form.launch[data-summary-ready]", state="attached")


def focused_id(page) -> str:
    return page.evaluate("document.activeElement?.id")


def test_the_summary_lists_each_refused_field_and_the_first_takes_the_focus(page, screenshot, asgi_server,
                                                                            make_user):
    catalog_sync()
    make_user("alice", password="a-long-test-password")
    log_in(page, asgi_server, "alice")
    open_form(page, asgi_server)
    page.fill("#id_steps", "99999999999")  # past what a run can store
    # learning_rate's group starts folded: emptied as a user who unfolded it would.
    page.eval_on_selector("#id_learning_rate", "input => { input.value = ''; }")
    submit_refused(page)
    assert not Run.objects.exists()

    summary = page.locator("#error-summary")
    expect(summary).to_be_visible()
    assert summary.get_attribute("role") == "alert"
    links = summary.locator("a[data-target]")
    expect(links).to_have_text(["steps", "learning_rate"])
    assert "steps must be at most 2,147,483,647" in summary.inner_text()  # the launch check's words, at every door
    assert "This field is required." in summary.inner_text()
    # The first refused field has the focus and is in view, far below the summary.
    assert focused_id(page) == "id_steps"
    expect(page.locator("#id_steps")).to_be_in_viewport()
    assert page.locator("#id_steps").bounding_box()["y"] > 0
    page.evaluate("window.scrollTo(0, 0)")
    screenshot("launch-form-refused-summary")

    # A link opens its field's group (folded again here) and focuses the field.
    group = page.locator("details.group", has=page.locator("#field-learning_rate"))
    group.evaluate("details => { details.open = false; }")
    expect(page.locator("#id_learning_rate")).to_be_hidden()
    links.nth(1).click()
    expect(page.locator("#id_learning_rate")).to_be_visible()
    assert focused_id(page) == "id_learning_rate"
    expect(page.locator("#id_learning_rate")).to_be_in_viewport()
    expect(page.locator("#error-learning_rate")).to_be_visible()


def test_a_staff_launch_over_the_limits_asks_to_confirm_first(page, screenshot, asgi_server, make_user):
    catalog_sync()
    make_user("boss", staff=True, password="a-long-test-password")
    log_in(page, asgi_server, "boss")
    open_form(page, asgi_server)
    page.fill("#id_steps", "1000000000")
    submit_refused(page)
    assert not Run.objects.exists()  # over the token limit: asked, not launched

    summary = page.locator("#error-summary")
    expect(summary).to_contain_text("Over the launch limits")
    expect(summary).to_contain_text("your limit is 50,000,000")
    assert focused_id(page) == "id_steps"
    expect(page.locator("#error-steps")).to_contain_text("confirm at the top of the form")
    page.evaluate("window.scrollTo(0, 0)")
    screenshot("launch-form-over-limits")

    page.click("#launch-anyway")
    page.wait_for_url("**/runs/*/")
    run = Run.objects.get()
    assert run.config["steps"] == 1_000_000_000 and page.url.endswith(f"/runs/{run.pk}/")
