"""Two open pages of one run: a state change made from one (a cancel, in the web process) reaches the
other through the run's websocket, from the one listener on the run's state change, not through the
page's quiet poll over HTTP."""

import pytest

from tests.browser.session import PASSWORD, log_in
from tests.suites import UI_ONLY
from tests.webapp.runs.factories import make_run
from webapp.runs.models import Run

pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=UI_ONLY), pytest.mark.django_db(transaction=True)]

SOCKET_OPEN = "() => window.cohortRun?.socket?.readyState === WebSocket.OPEN"


def test_a_cancel_in_one_page_shows_cancelling_in_the_other_over_the_socket(page, asgi_server, make_user):
    alice = make_user("alice", password=PASSWORD)
    run = make_run(alice, state=Run.State.RUNNING)
    log_in(page, asgi_server, "alice")
    other = page.context.new_page()
    for each in (page, other):
        each.goto(f"{asgi_server}/runs/{run.pk}/")
        each.wait_for_function(SOCKET_OPEN)
    assert other.inner_text("#run-state") == "running"

    # The other page can no longer read the run over HTTP: only its websocket can tell it.
    asked_over_http = []

    def refuse(route):
        asked_over_http.append(route.request.url)
        route.abort()

    other.route("**/metrics.json*", refuse)
    page.click("text=Cancel run")
    page.wait_for_function("() => document.getElementById('run-state').textContent === 'cancelling'")
    # Well inside the quiet poll's 10 s, and it could not have answered anyway.
    other.wait_for_function("() => document.getElementById('run-state').textContent === 'cancelling'", timeout=5000)
    assert Run.objects.get(pk=run.pk).state == Run.State.CANCELLING
    # The status notice makes the page read the run's last steps; those reads were refused above.
    assert all("after=" in url for url in asked_over_http)
