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


@pytest.fixture
def browser(monkeypatch):
    """One Chromium per test: Playwright's sync API keeps an event loop running in this thread
    while it is open, which must not outlive the test (later tests use async_to_sync)."""
    from playwright.sync_api import sync_playwright

    # With that loop running, Django's async-safety check would refuse the ORM calls that the
    # test's own fixtures make on this thread; scoped to this test only.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--no-first-run", "--disable-sync"],
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
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
