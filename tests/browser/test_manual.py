"""The manual in a real browser, served by Cohort at /docs/ (webapp/manual) from the session's real build
(`docs_site`, `make docs` with --strict), with every request to another host refused, as on a lab server with
no internet: the top bar's Docs link opens it, a launch form group's help link lands on that group's section
of the settings reference, and Material's search box finds a setting."""

import re
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import ARTIFACTS
from tests.browser.session import log_in
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.models import Task

NEUTRAL = ("the manual's static pages and the dashboard's links into them in a real browser; the pages hold "
           "nothing from the database, and the launch form and runs table they link from are tested on both "
           "backends by tests/webapp/runs")
pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def test_docs_from_the_top_bar_a_groups_help_link_and_search_offline(page, screenshot, asgi_server, make_user,
                                                                     docs_site):
    refused = []

    def offline(route):
        if urlsplit(route.request.url).hostname in LOOPBACK or route.request.url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort("internetdisconnected")

    page.context.route("**/*", offline)  # the whole context: the help link's new tab and the search worker too
    catalog_sync()
    make_user("alice", password="a-long-test-password")
    log_in(page, asgi_server, "alice")

    # The top bar's Docs link opens the manual's home page.
    page.click("#docs-link")
    page.wait_for_url(f"{asgi_server}/docs/")
    expect(page).to_have_title(re.compile(r"\bCohort$"))
    expect(page.locator("article h1")).to_be_visible()

    # The launch form's "Optimization" group (folded at first) links to its section of the settings reference,
    # in a new tab so that the form keeps what was typed in.
    page.goto(f"{asgi_server}/runs/new?task={Task.objects.get(name='toy').pk}")
    help_link = page.locator("details.group", has=page.locator("summary", has_text="Optimization")).locator(
        "summary a.group-help")
    expect(help_link).to_have_attribute("href", "/docs/reference/settings/#group-optim")
    screenshot("launch-form-group-help")
    with page.expect_popup() as opened:
        help_link.click()
    reference = opened.value
    reference.wait_for_load_state("load")
    assert reference.url == f"{asgi_server}/docs/reference/settings/#group-optim"
    section = reference.locator("#group-optim")
    expect(section).to_contain_text("Optimization")
    expect(section).to_be_in_viewport()
    ARTIFACTS.mkdir(exist_ok=True)
    reference.screenshot(path=str(ARTIFACTS / "manual-settings-optim.png"), animations="disabled")
    reference.close()

    # Search works offline: Material's search worker reads the site's own index.
    page.goto(f"{asgi_server}/docs/")
    page.click("input.md-search__input")
    page.locator("input.md-search__input").press_sequentially("learning_rate")
    results = page.locator(".md-search-result__item")
    expect(results.first).to_be_visible(timeout=15_000)
    expect(page.locator(".md-search-result__meta")).to_contain_text("matching document")
    expect(page.locator(".md-search-result__list")).to_contain_text("learning_rate")
    screenshot("manual-search")
    assert not refused, f"the manual asked another host for {refused}"
