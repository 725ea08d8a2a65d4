"""The Credit section: the run page's fragment and the step page, for each caller; bad input; the
number of queries at two sizes."""

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.webapp.runs.credit.builders import constructed_step, on_chain
from tests.webapp.runs.seeding import constant_step_event, ingest, make_run, mhgpo_step_event
from webapp.projects.models import Role
from webapp.projects.services import member_add, project_create
from webapp.sharing.services import share_link_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(owner):
    found = on_chain(make_run(owner, config={"strategy": "mhgpo"}))
    ingest(found, [constructed_step(1), constructed_step(2)])
    return found


def fragment(run, query=""):
    return reverse("runs:credit", args=[run.pk]) + query


def cells(html: str, css: str) -> dict[str, str]:
    """{module: the text of its cell of class `css`} in the credit table."""
    rows = re.findall(r'<tr class="credit-row" data-module="([^"]+)">(.*?)</tr>', html, re.S)
    return {m: re.search(rf'class="num {css}"[^>]*>([^<]*)<', body).group(1).strip() for m, body in rows}


def test_the_owner_reads_the_fragment_with_the_table(client, owner, run):
    client.force_login(owner)
    response = client.get(fragment(run))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="credit-table"' in html and 'id="credit-chart"' in html
    assert cells(html, "credit-share") == {"answerer": "0.706", "rewriter": "0.294"}  # (2.5/4.5 + 3/3.5) / 2
    assert cells(html, "credit-change") == {"answerer": "0.400", "rewriter": "0.214"}  # 1 - F1; 3/14
    assert "Change made from step 1 to step 2" in html


def test_the_run_page_loads_the_section_for_a_multi_module_program_only(client, owner, run):
    client.force_login(owner)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert 'id="credit-section"' in page and fragment(run) in page
    single = make_run(owner)  # the toy program: one module
    ingest(single, [constant_step_event(1)])
    assert 'id="credit-section"' not in client.get(reverse("runs:detail", args=[single.pk])).content.decode()
    # Its fragment, asked for all the same, says why there is nothing to split.
    html = client.get(fragment(single)).content.decode()
    assert 'id="credit-note"' in html and "one module" in html


def test_the_step_page_shows_that_steps_credit(client, owner, run):
    client.force_login(owner)
    html = client.get(reverse("runs:step", args=[run.pk, 2])).content.decode()
    assert 'id="credit-section"' in html and "At step 2" in html
    assert cells(html, "credit-share") == {"answerer": "0.857", "rewriter": "0.143"}
    first = client.get(reverse("runs:step", args=[run.pk, 1])).content.decode()
    assert 'id="credit-change-absent"' in first and "earliest step" in first


def test_stranger_404_anonymous_to_login(client, stranger, run):
    response = Client().get(fragment(run))
    assert response.status_code == 302 and response.url.startswith(reverse("login"))
    client.force_login(stranger)
    assert client.get(fragment(run)).status_code == 404
    assert client.get(reverse("runs:step", args=[run.pk, 2])).status_code == 404


def test_a_viewer_and_a_share_link_read_it(client, make_user, owner):
    viewer = make_user("vi")
    project = project_create(creator=owner, name="lab-credit")
    member_add(project, user=viewer, role=Role.VIEWER)
    found = on_chain(make_run(owner, project=project, config={"strategy": "mhgpo"}))
    ingest(found, [constructed_step(1), constructed_step(2)])
    client.force_login(viewer)
    assert 'id="credit-table"' in client.get(fragment(found)).content.decode()
    link = share_link_create(creator=owner, runs=[found])
    browser = Client()
    assert browser.get(reverse("sharing:open", args=[link.token])).status_code == 302
    assert 'id="credit-table"' in browser.get(fragment(found)).content.decode()
    assert 'id="credit-section"' in browser.get(reverse("runs:step", args=[found.pk, 2])).content.decode()


@pytest.mark.parametrize("query", ["?from=x", "?to=1.5", "?from=0", "?from=2&to=1", "?from=2&to=2", "?from=-1",
                                   "?from=99999999999999999999999"])
def test_bad_steps_are_400_with_a_message(client, owner, run, query):
    client.force_login(owner)
    response = client.get(fragment(run, query))
    assert response.status_code == 400
    assert 'id="credit-error"' in response.content.decode() and "&#x27;" in response.content.decode()


@pytest.mark.parametrize("query", ["?from=x", "?from=2", "?from=3"])
def test_bad_from_on_the_step_page_is_400(client, owner, run, query):
    client.force_login(owner)
    response = client.get(reverse("runs:step", args=[run.pk, 2]) + query)
    assert response.status_code == 400 and "from" in response.content.decode()


def test_steps_that_hold_nothing_are_said_not_500(client, owner, run):
    client.force_login(owner)
    html = client.get(fragment(run, "?from=1&to=7")).content.decode()
    assert 'id="credit-change-absent"' in html and "Step 7 stored no rollouts" in html


def test_no_advantages_is_said(client, owner):
    found = on_chain(make_run(owner))
    ingest(found, [constructed_step(1, with_groups=False), constructed_step(2, with_groups=False)])
    client.force_login(owner)
    html = client.get(fragment(found)).content.decode()
    assert 'id="credit-no-advantages"' in html and "stored no advantages" in html
    assert cells(html, "credit-share") == {"answerer": "—", "rewriter": "—"}


def test_a_run_with_nothing_stored_says_so(client, owner):
    found = on_chain(make_run(owner))
    client.force_login(owner)
    html = client.get(fragment(found)).content.decode()
    assert 'id="credit-note"' in html and "No step" in html


def _queries(client, url) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_the_number_of_queries_does_not_grow_with_the_run(client, owner):
    small = on_chain(make_run(owner, config={"strategy": "mhgpo"}))
    ingest(small, [mhgpo_step_event(s, questions=2, group_size=2) for s in (1, 2)])
    large = on_chain(make_run(owner, config={"strategy": "mhgpo"}))
    ingest(large, [mhgpo_step_event(s, questions=5, group_size=3) for s in range(1, 9)])
    client.force_login(owner)
    assert _queries(client, fragment(small)) == _queries(client, fragment(large))
    step_small = _queries(client, reverse("runs:step", args=[small.pk, 2]))
    assert step_small == _queries(client, reverse("runs:step", args=[large.pk, 2]))


def test_an_external_run_gets_the_section_and_is_told_it_stored_no_advantages(client, owner):
    found = make_run(owner, origin="sdk")  # the one-module placeholder program of runs trained elsewhere
    ingest(found, [constructed_step(1, with_groups=False), constructed_step(2, with_groups=False)])
    client.force_login(owner)
    assert 'id="credit-section"' in client.get(reverse("runs:detail", args=[found.pk])).content.decode()
    html = client.get(fragment(found)).content.decode()
    assert "This run stored no advantages" in html and 'id="credit-table"' in html
    step = client.get(reverse("runs:step", args=[found.pk, 2])).content.decode()
    assert 'id="credit-no-advantages"' in step
