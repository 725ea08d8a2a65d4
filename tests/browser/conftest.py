"""Real-browser fixtures: Playwright driving Debian's Chromium (no browser download)."""

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT

ARTIFACTS = ROOT / "test-artifacts"


def chromium_path() -> str:
    path = os.environ.get("COHORT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("Browser tests need Chromium: apt-get install chromium, or set COHORT_CHROMIUM", pytrace=False)
    return path


@pytest.fixture(scope="package")
def browser():
    """One Chromium for the browser tests (a start costs seconds; each test gets a context of its own,
    which shares no cookies or storage with another). Package-scoped, not session-scoped: Playwright's
    sync API keeps an event loop running on this thread while it is open, which must not outlive this
    folder's tests (the tests after it use async_to_sync on this thread)."""
    from playwright.sync_api import sync_playwright

    # With that loop running, Django's async-safety check would refuse the ORM calls that the tests'
    # own fixtures make on this thread; for this folder's tests only.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium_path(),
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                      "--no-first-run", "--disable-sync"],
            )
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser, asgi_server):
    # After asgi_server, so the page is closed before the server's last requests are waited for and the
    # test database is emptied: a page left open may still send a save while its tables are truncated.
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def screenshot(page):
    """Saves a full-page screenshot under test-artifacts/ (git-ignored) to look at."""
    ARTIFACTS.mkdir(exist_ok=True)

    def take(name: str) -> Path:
        path = ARTIFACTS / f"{name}.png"
        # A screenshot is an artifact to look at, not an assertion: on a busy machine capturing a long
        # page (with a progress bar animating) can take longer than Playwright's 30 s default, so give it
        # room and stop CSS animations rather than fail the test over it.
        page.screenshot(path=str(path), full_page=True, animations="disabled", timeout=120_000)
        return path

    return take
