"""The part-ways page: the owner, a stranger, an anonymous browser; the table, its counts and links to
the example across the runs; every refusal a message in the page."""

from html import unescape
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client
from django.urls import reverse

from tests.webapp.runs.examples.partways_world import EXPECTED_ORDER, world
from tests.webapp.runs.factories import make_program
from tests.webapp.runs.seeding import make_run
from webapp.runs.models import Run, Task

pytestmark = pytest.mark.django_db
URL = reverse("runs:examples_partways")


@pytest.fixture
def sides(owner):
    return world(owner)


def ids(runs) -> str:
    return ",".join(str(r.pk) for r in runs)


@pytest.fixture
def browser(owner):
    client = Client()
    client.force_login(owner)
    return client


def test_the_owner_sees_the_ranked_table_with_counts_and_links(browser, sides):
    gdpo, grpo = sides
    response = browser.get(URL, {"a": ids(gdpo), "b": ids(grpo)})
    assert response.status_code == 200
    page = response.content.decode()
    rows = response.context["rows"]
    assert [row["example_id"] for row in rows] == EXPECTED_ORDER
    assert "Where these runs part" in page and "A (3 runs, averaged)" in page
    assert 'data-kind="learned_a">4</span>' in page and 'data-kind="lost_b">1</span>' in page
    # Each row opens the example across every run of both sides.
    link = urlsplit(rows[0]["url"])
    assert link.path == reverse("runs:examples_across")
    assert parse_qs(link.query) == {"runs": [ids([*gdpo, *grpo])], "example": ["e1"]}
    assert f'href="{rows[0]["url"].replace("&", "&amp;")}"' in page
    assert rows[0]["sides"][0][1]["share"] == "0.00 → 1.00" and rows[0]["sides"][1][1]["first_right"] == "never"
    assert rows[-1]["sides"][1] == ("b", None) and "not drawn" in page


def test_kind_limit_and_solved(browser, sides):
    gdpo, grpo = sides
    learned = browser.get(URL, {"a": ids(gdpo), "b": ids(grpo), "kind": "learned_a"}).context["rows"]
    assert [row["example_id"] for row in learned] == ["e1", "e2", "e3", "e8"]
    capped = browser.get(URL, {"a": ids(gdpo), "b": ids(grpo), "limit": 2})
    assert len(capped.context["rows"]) == 2 and "Showing the first 2 of 9 examples" in capped.content.decode()
    assert parse_qs(urlsplit(capped.context["more_url"]).query)["limit"] == ["10"]
    solved = browser.get(URL, {"a": ids(gdpo), "b": ids(grpo), "solved": "0.5"})
    assert solved.context["table"].counts["solved_both"] == 8
    assert "solved=0.5" in solved.context["rows"][0]["url"]  # the across page counts right as this one does


@pytest.mark.parametrize(("query", "message"), [
    ({"b": "1"}, "'a' names no run"),
    ({"a": "1,x", "b": "2"}, "'a' takes up to 16 run ids"),
    ({"a": ",".join(["1"] * 17), "b": "2"}, "'a' takes up to 16 run ids"),
    ({"a": "1", "b": "2", "solved": "1e999"}, "'solved' must be a finite number"),
    ({"a": "1", "b": "2", "solved": "1_0"}, "'solved' must be a number"),
    ({"a": "1", "b": "2", "kind": "odd"}, "'kind' must be one of"),
    ({"a": "1", "b": "2", "limit": "0"}, "'limit' must be between 1 and 5000"),
])
def test_malformed_parameters_are_a_400_with_words(browser, query, message):
    response = browser.get(URL, query)
    assert response.status_code == 400 and message in unescape(response.content.decode())


def test_runs_that_cannot_be_compared_say_why(owner, browser, sides):
    gdpo, grpo = sides
    same = browser.get(URL, {"a": gdpo[0].pk, "b": gdpo[0].pk})
    assert same.status_code == 200 and "Both sides are the same runs" in same.content.decode()
    other = make_run(owner, name="elsewhere")
    other.task = Task.objects.create(name="other-task", title="Other", program=make_program())
    other.save(update_fields=["task"])
    different = browser.get(URL, {"a": gdpo[0].pk, "b": other.pk})
    assert different.status_code == 400 and "train different tasks" in different.content.decode()
    empty = make_run(owner, state=Run.State.QUEUED, name="not started")
    only_a = browser.get(URL, {"a": gdpo[0].pk, "b": empty.pk})
    text = only_a.content.decode()
    assert only_a.status_code == 200 and f"Run {empty.pk} (not started) has no rollouts stored yet" in text
    assert 'data-kind="only_a">9</span>' in text
    nothing = browser.get(URL, {"a": empty.pk, "b": make_run(owner, name="also empty").pk})
    assert "Neither side has rollouts of any example yet" in nothing.content.decode()


def test_a_stranger_gets_404_and_an_anonymous_browser_the_login(sides, stranger):
    gdpo, grpo = sides
    query = {"a": ids(gdpo), "b": ids(grpo)}
    other = Client()
    other.force_login(stranger)
    assert other.get(URL, query).status_code == 404
    anonymous = Client().get(URL, query)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith(reverse("login"))
    # One unreadable run among readable ones is a 404 too.
    mine = make_run(stranger, state=Run.State.SUCCEEDED, name="theirs")
    assert other.get(URL, {"a": mine.pk, "b": gdpo[0].pk}).status_code == 404


def test_more_runs_than_the_across_page_shows(owner, browser):
    from webapp.runs.examples.partways_views import across_runs

    a = [make_run(owner, name=f"a{i}") for i in range(10)]
    b = [make_run(owner, name=f"b{i}") for i in range(2)]
    assert across_runs(a, b) == [r.pk for r in [*a[:6], *b]]
    assert across_runs(a, a[:0] + b[:1]) == [r.pk for r in [*a[:7], b[0]]]
    assert across_runs(a[:5], a[5:]) == [r.pk for r in [*a[:4], *a[5:9]]]  # half the columns each


def test_the_compare_page_links_to_where_the_seed_groups_part(owner, browser, sides):
    gdpo, grpo = sides
    page = browser.get(reverse("runs:compare"), [("runs", r.pk) for r in [*gdpo, *grpo]])
    assert page.status_code == 200
    link = urlsplit(page.context["parting_url"])
    assert link.path == URL and parse_qs(link.query) == {"a": [ids(gdpo)], "b": [ids(grpo)]}  # the seed groups
    text = page.content.decode()
    assert "Where these runs part" in text and "3 runs against 3, each side averaged" in text
    assert f'<input type="hidden" name="runs" value="{ids([*gdpo, *grpo])}">' in text
    assert f'action="{reverse("runs:examples_across")}"' in text
    # The link opens the table of the two groups.
    table = browser.get(page.context["parting_url"]).context["rows"]
    assert [row["example_id"] for row in table][:3] == ["e1", "e2", "e3"]


def test_the_compare_page_has_no_link_for_one_run_or_several_tasks(owner, browser, sides):
    gdpo, _ = sides
    one = browser.get(reverse("runs:compare"), {"runs": gdpo[0].pk})
    assert one.context["parting_url"] is None and "Where these runs part" not in one.content.decode()
    other = make_run(owner, name="elsewhere")
    other.task = Task.objects.create(name="other-task", title="Other", program=make_program())
    other.save(update_fields=["task"])
    mixed = browser.get(reverse("runs:compare"), [("runs", gdpo[0].pk), ("runs", other.pk)])
    assert mixed.status_code == 200 and mixed.context["parting_url"] is None
    assert "compare-across-form" not in mixed.content.decode()
