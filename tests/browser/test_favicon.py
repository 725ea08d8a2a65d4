"""The favicon in a real browser (issue 27, item 4): every page's <link rel="icon"> loads from the
site's root (WhiteNoise), and loading the pages a researcher lives on asks for nothing that fails
(it was a 404 on every page load)."""

import pytest

from tests.browser.session import PASSWORD, log_in
from tests.suites import UI_ONLY
from tests.webapp.runs.seeding import constant_step_event, ingest, make_run
from webapp.runs.models import Run

pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=UI_ONLY), pytest.mark.django_db(transaction=True)]


def test_pages_load_their_icon_and_nothing_fails(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    run = make_run(owner, state=Run.State.SUCCEEDED, name="icon")
    ingest(run, [constant_step_event(1)])
    failed = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.goto(f"{asgi_server}/login/")
    # The icon the page names is the one served, as an image the browser can decode.
    size = page.evaluate("""async () => {
        const href = document.querySelector("link[rel=icon]").href;
        const image = new Image();
        image.src = href;
        await image.decode();
        return [new URL(href).pathname, image.naturalWidth, image.naturalHeight];
    }""")
    assert size[0] == "/favicon.ico" and size[1] > 0 and size[2] > 0, size
    log_in(page, asgi_server, "alice")
    for path in ("/", f"/runs/{run.pk}/", "/runs/new", f"/runs/compare?runs={run.pk}"):
        page.goto(f"{asgi_server}{path}")
        page.wait_for_load_state("load")
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    page.wait_for_function("() => document.querySelector('#chart-reward')?.dataset.points === '1'")
    assert failed == []
    screenshot("favicon-run-page")
