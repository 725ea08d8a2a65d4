"""The per-example history page: what a visit holds, links to and from the inspectors, access,
bad input, odd example ids, the visit cap and a query count that does not grow with the visits."""

import json
import re
from statistics import mean

import pytest
from django.db import connection
from django.db.models import Avg
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.webapp.runs.seeding import hover_step_event, ingest, make_run
from webapp.runs.inspector import history
from webapp.runs.inspector.grid_cells import example_history_url
from webapp.runs.inspector.history import example_history
from webapp.runs.models import Group, Rollout, Run

pytestmark = pytest.mark.django_db


def renamed(event: dict, old: str, new: str) -> dict:
    """The event with example `old` called `new` (in its rollouts and groups)."""
    for row in event["rollouts"] + event["groups"]:
        if row.get("example_id") == old:
            row["example_id"] = new
    return event


@pytest.fixture
def run(owner):
    """Steps 1-3 of attempt 1, then attempt 2 (a resume) stored step 3 again with other rollouts."""
    run = make_run(owner, state=Run.State.RUNNING, config={"strategy": "grpo", "padding": "fill"})
    ingest(run, [hover_step_event(s, rollouts=5, group_size=6) for s in (1, 2, 3)])
    ingest(run, [hover_step_event(3, rollouts=5, group_size=6, attempt=2, seed=9)])
    return run


def page_url(run, example_id="claim-0", **query) -> str:
    url = example_history_url(run.pk, example_id)
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def test_a_visit_per_step_from_the_newest_attempt(run):
    found = example_history(run, "claim-0")
    assert [(v.step, v.attempt) for v in found.visits] == [(3, 2), (2, 1), (1, 1)]
    assert not found.capped and found.before is None
    assert found.modules == ["create_query", "summarize"]
    for visit in found.visits:
        rows = list(Rollout.objects.filter(run=run, attempt=visit.attempt, step=visit.step, example_id="claim-0")
                    .order_by("index"))
        rewards = [(r.index, r.total_reward) for r in rows if r.total_reward is not None]
        assert visit.rollouts == len(rows) == 5 and visit.failures == sum(r.failed for r in rows)
        assert visit.rewards == rewards
        assert visit.mean == pytest.approx(mean(r for _, r in rewards))
        assert (visit.low, visit.high) == (min(r for _, r in rewards), max(r for _, r in rewards))
        for module in found.modules:
            groups = Group.objects.filter(run=run, attempt=visit.attempt, step=visit.step, example_id="claim-0",
                                          module=module)
            stats = visit.modules[module]
            assert stats.groups == groups.count() > 0
            assert stats.variance == pytest.approx(groups.aggregate(v=Avg("reward_var"))["v"])
            assert stats.similarity == pytest.approx(groups.aggregate(v=Avg("similarity"))["v"])


def test_page_shows_chart_data_and_visits_table_with_inspector_links(client, owner, run):
    client.force_login(owner)
    response = client.get(page_url(run))
    assert response.status_code == 200
    html = response.content.decode()
    chart = json.loads(re.search(r'<script id="history-data" type="application/json">(.*?)</script>', html, re.S)
                       .group(1))
    assert chart["steps"] == [1, 2, 3]  # oldest first for the chart
    assert [len(r) for r in chart["rewards"]] == [len(v.rewards) for v in reversed(example_history(run, "claim-0").visits)]
    assert [m["name"] for m in chart["modules"]] == ["create_query", "summarize"]
    assert all(len(m["variance"]) == len(m["similarity"]) == 3 for m in chart["modules"])
    assert html.count('<tr class="visit"') == 3
    assert 'id="reward-chart"' in html and 'id="group-chart"' in html
    # Each visit links to the trajectory inspector of that step and attempt; the links work.
    links = re.findall(r'class="inspect-link" href="([^"]+)"', html)
    inspector = reverse("runs:trajectories", args=[run.pk, 3])
    assert links[0] == f"{inspector}?example=claim-0&amp;attempt=2"
    for link in links:
        assert client.get(link.replace("&amp;", "&")).status_code == 200


def test_inspector_and_step_page_link_to_the_history(client, owner, run):
    client.force_login(owner)
    target = example_history_url(run.pk, "claim-0")
    assert target == f"/runs/{run.pk}/examples/claim-0/"
    grid = client.get(reverse("runs:trajectories", args=[run.pk, 2]), {"example": "claim-0"}).content.decode()
    assert f'id="history-link" href="{target}">History of this example</a>' in grid
    step = client.get(reverse("runs:step", args=[run.pk, 2])).content.decode()
    assert re.findall(r'class="history-link" href="([^"]+)"', step) == [target, example_history_url(run.pk, "claim-1")]


def test_anonymous_stranger_owner_staff(client, owner, stranger, staff, run):
    url = page_url(run)
    response = client.get(url)
    assert response.status_code == 302 and response.url.startswith(reverse("login"))
    client.force_login(stranger)
    assert client.get(url).status_code == 404
    assert client.get(reverse("runs:example_history_query", args=[run.pk]), {"example": "claim-0"}).status_code == 404
    for user in (owner, staff):
        client.force_login(user)
        assert client.get(url).status_code == 200


@pytest.mark.parametrize("url, status", [
    ("/runs/{run}/examples/nobody/", 404),  # never drawn
    ("/runs/999999/examples/claim-0/", 404),  # no such run
    ("/runs/{run}/examples/claim-0/?before=1", 404),  # nothing before step 1
    ("/runs/{run}/examples/claim-0/?before=x", 400),
    ("/runs/{run}/examples/claim-0/?before=0", 400),
    ("/runs/{run}/examples/", 400),  # the query form needs ?example=
    ("/runs/{run}/examples/?example=" + "x" * 201, 400),
])
def test_bad_input_is_4xx(client, owner, run, url, status):
    client.force_login(owner)
    assert client.get(url.format(run=run.pk)).status_code == status


def test_post_is_refused(client, owner, run):
    client.force_login(owner)
    assert client.post(page_url(run)).status_code == 405


@pytest.mark.parametrize("odd", ["dir/sub/item?x=1#frag 100%", "a/../b", ".", "ü ids/ok"])
def test_ids_with_slashes_and_odd_characters_round_trip(client, owner, odd):
    run = make_run(owner)
    ingest(run, [renamed(hover_step_event(s), "claim-0", odd) for s in (1, 2)])
    url = example_history_url(run.pk, odd)
    # Dot segments would be rewritten by a browser: those ids travel in the query string.
    assert ("?example=" in url) == (odd in {"a/../b", "."})
    client.force_login(owner)
    response = client.get(url)
    assert response.status_code == 200, url
    assert [v.step for v in response.context["history"].visits] == [2, 1]
    assert response.context["history"].example_id == odd


def test_visits_are_capped_with_a_link_to_older_ones(client, owner, run, monkeypatch):
    monkeypatch.setattr(history, "VISITS_CAP", 2)
    client.force_login(owner)
    first = client.get(page_url(run))
    found = first.context["history"]
    assert [v.step for v in found.visits] == [3, 2] and found.capped and found.older_before == 2
    html = first.content.decode()
    assert 'id="visits-cap"' in html and "Showing the 2 most recent visits" in html
    older = re.search(r'href="([^"]+)" id="older-visits"', html).group(1).replace("&amp;", "&")
    assert older == page_url(run, before=2)
    second = client.get(older)
    assert [v.step for v in second.context["history"].visits] == [1] and not second.context["history"].capped


def count_queries(client, url) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    return len(queries.captured_queries)


def test_query_count_does_not_grow_with_visits_rollouts_or_groups(client, owner):
    small, large = make_run(owner), make_run(owner)
    ingest(small, [hover_step_event(s, examples=1, rollouts=2, group_size=2) for s in (1, 2)])
    ingest(large, [hover_step_event(s, examples=3, rollouts=8, group_size=9, seed=4) for s in range(1, 13)])
    ingest(large, [hover_step_event(s, examples=3, rollouts=8, group_size=9, attempt=2, seed=5) for s in (11, 12, 13)])
    client.force_login(owner)
    counts = [count_queries(client, page_url(r)) for r in (small, large)]
    assert len(example_history(large, "claim-0").visits) == 13
    assert counts[0] == counts[1]
