"""Step page, trajectory inspector, group inspector and prompts: access, content, bad input, query counts."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.webapp.runs.seeding import (
    collapse_step_event,
    error_step_event,
    hover_step_event,
    ingest,
    make_run,
    mhgpo_step_event,
)
from webapp.runs.inspector.steps import trajectory_grid
from webapp.runs.models import Group, GroupMember, ModuleCall, Rollout, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def hover_run(owner):
    run = make_run(owner, state=Run.State.RUNNING, config={"strategy": "grpo", "padding": "fill"})
    ingest(run, [hover_step_event(s) for s in (1, 2)])
    return run


def urls(run) -> list[str]:
    group = Group.objects.filter(run=run).first()
    call = ModuleCall.objects.filter(rollout__run=run).first()
    return [
        reverse("runs:step", args=[run.pk, 1]),
        reverse("runs:trajectories", args=[run.pk, 1]) + "?example=claim-0",
        reverse("runs:group", args=[run.pk, group.pk]),
        reverse("runs:call_prompt", args=[run.pk, call.pk]),
    ]


def test_anonymous_is_sent_to_login(client, hover_run):
    for url in urls(hover_run):
        response = client.get(url)
        assert response.status_code == 302 and response.url.startswith(reverse("login")), url


def test_stranger_gets_404_owner_and_staff_200(client, owner, stranger, staff, hover_run):
    client.force_login(stranger)
    for url in urls(hover_run):
        assert client.get(url).status_code == 404, url
    for user in (owner, staff):
        client.force_login(user)
        for url in urls(hover_run):
            assert client.get(url).status_code == 200, url


def test_objects_of_another_run_are_404_under_this_run(client, owner, hover_run):
    other = make_run(owner)
    ingest(other, [hover_step_event(1, seed=3)])
    group = Group.objects.filter(run=other).first()
    call = ModuleCall.objects.filter(rollout__run=other).first()
    client.force_login(owner)
    assert client.get(reverse("runs:group", args=[hover_run.pk, group.pk])).status_code == 404
    assert client.get(reverse("runs:call_prompt", args=[hover_run.pk, call.pk])).status_code == 404


@pytest.mark.parametrize("path, query, status", [
    ("step", "", 404),  # step 99 not stored
    ("trajectories", "?example=claim-0", 404),
    ("trajectories99", "?example=nobody", 404),
    ("trajectories", "", 400),
    ("trajectories", "?example=claim-0&attempt=x", 400),
    ("step1", "?offset=-3", 400),
    ("step1", "?attempt=7", 404),
])
def test_bad_input_is_4xx(client, owner, hover_run, path, query, status):
    client.force_login(owner)
    url = {
        "step": reverse("runs:step", args=[hover_run.pk, 99]),
        "step1": reverse("runs:step", args=[hover_run.pk, 1]),
        "trajectories": reverse("runs:trajectories", args=[hover_run.pk, 99 if query == "?example=claim-0" else 1]),
        "trajectories99": reverse("runs:trajectories", args=[hover_run.pk, 1]),
    }[path]
    assert client.get(url + query).status_code == status


def test_inspector_pages_refuse_post(client, owner, hover_run):
    client.force_login(owner)
    for url in urls(hover_run):
        assert client.post(url).status_code == 405


def test_grid_aligns_calls_by_module_and_invocation_index(hover_run):
    grid = trajectory_grid(hover_run, 1, "claim-0")
    rollouts = list(Rollout.objects.filter(run=hover_run, step=1, example_id="claim-0").order_by("index"))
    assert [r.rollout.pk for r in grid.rows] == [r.pk for r in rollouts]
    deepest = max(r.calls.count() for r in rollouts) // 2
    # Hops alternate create_query / summarize: the slots come in call order.
    assert grid.slots == [(m, i) for i in range(deepest) for m in ("create_query", "summarize")]
    for row, rollout in zip(grid.rows, rollouts, strict=True):
        calls = list(rollout.calls.order_by("position"))
        for cell, slot in zip(row.cells, grid.slots, strict=True):
            own = [c for c in calls if (c.module, c.invocation_index) == slot]
            assert (cell.call.pk if cell.call else None) == (own[0].pk if own else None)
        # A short rollout misses the later slots.
        assert sum(c.missing for c in row.cells) == len(grid.slots) - len(calls)


def test_grid_marks_padded_duplicated_and_differing_cells(hover_run):
    grid = trajectory_grid(hover_run, 1, "claim-0")
    # One padded cell per (group, rollout) that fill padding completed (up-sampling may copy a pad again).
    padded_members = len(set(GroupMember.objects.filter(
        group__run=hover_run, group__step=1, group__example_id="claim-0", padded=True,
    ).values_list("group_id", "call__rollout_id")))
    duplicated = GroupMember.objects.filter(group__run=hover_run, group__step=1, group__example_id="claim-0",
                                            duplicated=True).count()
    cells = [c for row in grid.rows for c in row.cells]
    assert sum(bool(c.padded_from) for c in cells) == padded_members > 0
    assert all(c.missing for c in cells if c.padded_from)  # fill pads exactly the slots a rollout lacks
    assert sum(c.duplicates for c in cells) == duplicated > 0
    differing = [c for c in cells if c.differs]
    assert differing and all(any(marked for _, marked in c.segments) for c in differing)
    assert all(len(g) for c in cells if c.call for g in [c.groups])  # every call sits in a group


def test_trajectory_page_renders_grid_and_prompt_on_demand(client, owner, hover_run):
    client.force_login(owner)
    response = client.get(reverse("runs:trajectories", args=[hover_run.pk, 1]), {"example": "claim-0"})
    html = response.content.decode()
    assert html.count('<tr class="rollout') == Rollout.objects.filter(run=hover_run, step=1, example_id="claim-0").count()
    assert "create_query#0" in html and "summarize#0" in html and "padded: copy of" in html
    assert "Claim:" not in html  # prompts are not in the page...
    prompt_url = re.search(r'data-url="([^"]+/prompt)"', html).group(1)
    body = client.get(prompt_url)
    assert body.status_code == 200 and body["Content-Type"].startswith("text/plain")
    assert body.content.decode().startswith("Claim:")  # ...they load on demand


def test_step_page_lists_examples_and_groups(client, owner, hover_run):
    client.force_login(owner)
    html = client.get(reverse("runs:step", args=[hover_run.pk, 1])).content.decode()
    assert "claim-0" in html and "claim-1" in html
    assert html.count("/groups/") == Group.objects.filter(run=hover_run, step=1).count()
    only = client.get(reverse("runs:step", args=[hover_run.pk, 1]), {"module": "summarize"}).content.decode()
    assert only.count("/groups/") == Group.objects.filter(run=hover_run, step=1, module="summarize").count()


def test_group_page_shows_grpo_collapse_that_gdpo_avoids(client, owner):
    run = make_run(owner, config={"strategy": "grpo", "rewards": [{"name": "format", "weight": 1.0},
                                                                   {"name": "correct", "weight": 1.0}]})
    ingest(run, [collapse_step_event()])
    group = Group.objects.get(run=run)
    assert group.reward_var == pytest.approx(0.25)  # totals (1, 1, 1, 0): the trainer's stats were stored
    client.force_login(owner)
    response = client.get(reverse("runs:group", args=[run.pk, group.pk]))
    view = response.context["view"]
    assert view.source == "members"
    assert (view.distinct_rewards, view.distinct_grpo, view.distinct_gdpo, view.distinct_used) == (3, 2, 3, 2)
    grpo = [m.grpo for m in view.members]
    # totals (1, 1, 1, 0), std 0.5 (+ eps 1e-4): (1,0) and (0,1) collapse onto one advantage
    assert grpo == pytest.approx([0.25 / 0.5001] * 3 + [-0.75 / 0.5001])
    gdpo = [round(m.gdpo, 4) for m in view.members]
    assert gdpo[0] != gdpo[1] == gdpo[2]
    assert [m.used for m in view.members] == pytest.approx([m.grpo for m in view.members])  # the run used GRPO
    assert view.similarity == pytest.approx(group.similarity)
    assert 'id="collapse-note"' in response.content.decode()


def test_group_page_for_mhgpo_uses_shared_and_specific_rewards(client, owner):
    run = make_run(owner, config={"strategy": "mhgpo", "sampling": "fof"})
    event = mhgpo_step_event(1)
    for group in event["groups"]:  # an older event without member components
        for member in group["members"]:
            member["reward_components"] = {}
    ingest(run, [event])
    group = Group.objects.filter(run=run, module="answerer").first()
    client.force_login(owner)
    view = client.get(reverse("runs:group", args=[run.pk, group.pk])).context["view"]
    assert view.source == "mhgpo" and view.names == ["shared", "specific"]
    for m in view.members:
        call = m.member.call
        assert m.total == pytest.approx(call.propagated_reward + call.specific_reward)
    assert [m.used for m in view.members] == pytest.approx([m.grpo for m in view.members], abs=1e-9)


def test_mhgpo_inspector_shows_fork_trees(client, owner):
    run = make_run(owner, config={"strategy": "mhgpo", "sampling": "fof"})
    ingest(run, [mhgpo_step_event(1, group_size=3)])
    grid = trajectory_grid(run, 1, "q0")
    (tree,) = grid.trees
    assert tree.fork_point == "rewriter" and tree.prefix == [] and len(tree.branches) == 3
    kinds = [[kind for _, kinds in b.calls for _, kind in kinds] for b in tree.branches]
    # The trunk's reranker output fails to parse (empty), so its trajectory stops there.
    assert kinds == [["homogeneous", "heterogeneous"]] + [["homogeneous", "heterogeneous", "heterogeneous"]] * 2
    client.force_login(owner)
    html = client.get(reverse("runs:trajectories", args=[run.pk, 1]), {"example": "q0"}).content.decode()
    assert 'id="forks"' in html and "fork at <strong>rewriter</strong> × 3" in html


def test_trajectory_inspector_shows_the_error_a_rollout_raised(client, owner):
    run = make_run(owner, config={"strategy": "mhgpo", "sampling": "fof"})
    ingest(run, [error_step_event(1)])
    grid = trajectory_grid(run, 1, "q0")
    (error,) = grid.errors
    assert (error.index, error.headline) == (1, "ZeroDivisionError: division by zero")
    assert error.details.startswith("in program step of module 'reranker'\nTraceback (most recent call last")
    assert "len(completion) / 0" in error.details
    assert [row.error_headline for row in grid.rows] == ["", "ZeroDivisionError: division by zero", ""]
    client.force_login(owner)
    html = client.get(reverse("runs:trajectories", args=[run.pk, 1]), {"example": "q0"}).content.decode()
    box = html[html.index('id="rollout-errors"'):html.index('id="grid-controls"')]
    assert "1 rollout raised" in box and box.count('class="error-box"') == 1
    assert 'id="error-1"' in box and '<span class="error-headline">ZeroDivisionError: division by zero</span>' in box
    assert "in program step of module &#x27;reranker&#x27;" in box  # escaped, as everything user-supplied
    # The rollout's row (and its fork branch) says it raised and links to the box.
    row = re.search(r'<tr class="rollout failed" data-error="1" data-index="1".*?</tr>', html, re.S).group(0)
    assert 'href="#error-1"' in row and ">raised</a>" in row and 'title="ZeroDivisionError: division by zero"' in row
    assert html.count('data-error="1"') == 1 and html.count('href="#error-1"') == 2
    # An example whose rollouts all ran through has no error section.
    other = client.get(reverse("runs:trajectories", args=[run.pk, 1]), {"example": "q1"}).content.decode()
    assert 'id="rollout-errors"' not in other and "error-box" not in other


def test_step_page_counts_the_rollouts_that_raised(client, owner):
    run = make_run(owner, config={"strategy": "mhgpo", "sampling": "fof"})
    ingest(run, [error_step_event(1)])
    client.force_login(owner)
    response = client.get(reverse("runs:step", args=[run.pk, 1]))
    assert {e["example_id"]: (e["failures"], e["errors"]) for e in response.context["examples"]} == {
        "q0": (1, 1), "q1": (0, 0)}
    assert '<td class="raised">1</td>' in response.content.decode()


def test_step_events_carry_group_stats_into_the_database(owner):
    run = make_run(owner)
    event = hover_step_event(1)
    ingest(run, [event])
    stored = {g.index: g for g in Group.objects.filter(run=run)}
    for index, sent in enumerate(event["groups"]):
        assert stored[index].reward_mean == pytest.approx(sent["reward_mean"])
        assert stored[index].reward_var == pytest.approx(sent["reward_var"])
        assert stored[index].similarity == pytest.approx(sent["similarity"])
    member = GroupMember.objects.filter(group__run=run).order_by("group__index", "position").first()
    assert set(member.reward_components) == {"recall", "format"}


# --- query counts: constant in rollouts, calls and groups -----------------------------------------


def count_queries(client, url, **params) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, params)
    assert response.status_code == 200, response.content[:300]
    return len(queries.captured_queries)


def test_inspector_pages_query_count_does_not_grow(client, owner):
    small, large = make_run(owner), make_run(owner)
    ingest(small, [hover_step_event(1, examples=1, rollouts=2, group_size=2)])
    ingest(large, [hover_step_event(1, examples=6, rollouts=12, group_size=14, seed=5)])
    assert Rollout.objects.filter(run=large).count() == 36 * Rollout.objects.filter(run=small).count()
    client.force_login(owner)
    counts = []
    for run in (small, large):
        group = Group.objects.filter(run=run).order_by("-size").first()
        counts.append((
            count_queries(client, reverse("runs:step", args=[run.pk, 1])),
            count_queries(client, reverse("runs:trajectories", args=[run.pk, 1]), example="claim-0"),
            count_queries(client, reverse("runs:group", args=[run.pk, group.pk])),
        ))
    assert counts[0] == counts[1]


def test_collapse_group_query_count_does_not_grow_with_members(client, owner):
    small, large = make_run(owner), make_run(owner)
    ingest(small, [collapse_step_event(members=4)])
    ingest(large, [collapse_step_event(members=40)])
    client.force_login(owner)
    counts = [count_queries(client, reverse("runs:group", args=[r.pk, Group.objects.get(run=r).pk])) for r in (small, large)]
    assert counts[0] == counts[1]


def test_mhgpo_inspector_query_count_does_not_grow(client, owner):
    small, large = make_run(owner, config={"strategy": "mhgpo"}), make_run(owner, config={"strategy": "mhgpo"})
    ingest(small, [mhgpo_step_event(1, questions=1, group_size=2)])
    ingest(large, [mhgpo_step_event(1, questions=3, group_size=8)])
    client.force_login(owner)
    counts = [count_queries(client, reverse("runs:trajectories", args=[r.pk, 1]), example="q0") for r in (small, large)]
    assert counts[0] == counts[1]


def test_fork_trees_are_shown_for_mhgpo_runs_only(client, owner):
    # GRPO and MMGRPO sample their rollouts with fork_on_first too, so the rollouts carry parent links;
    # the same stored rollouts under another strategy must not show an "MHGPO fork trees" section.
    run = make_run(owner, config={"strategy": "mmgrpo"})
    ingest(run, [mhgpo_step_event(1, group_size=3)])
    assert trajectory_grid(run, 1, "q0").trees  # the links are there
    client.force_login(owner)
    html = client.get(reverse("runs:trajectories", args=[run.pk, 1]), {"example": "q0"}).content.decode()
    assert 'id="forks"' not in html and "Fork trees" not in html
