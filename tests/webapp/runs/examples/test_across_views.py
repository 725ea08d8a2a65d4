"""The across-runs page: what it shows, who may read it (owner, viewer, stranger, anonymous, a share
link's holder), bad input as a 400 with its message, an absent example as a 404 with words, the
history page's form that opens it, and a query count that does not grow with the visits."""

import re

import pytest
from django.urls import reverse

from tests.webapp.runs.examples.across_world import A_VISITS, B_VISITS, run_with, visit
from tests.webapp.runs.factories import make_program
from webapp.projects.models import Role
from webapp.projects.services import member_add, project_create
from webapp.runs.inspector.grid_cells import example_history_url
from webapp.runs.models import Run, Task

pytestmark = pytest.mark.django_db
URL = reverse("runs:examples_across")


@pytest.fixture
def runs(owner):
    return run_with(owner, A_VISITS, name="gdpo"), run_with(owner, B_VISITS, name="grpo")


def query(runs, example="q1", **more):
    return {"runs": ",".join(str(getattr(r, "pk", r)) for r in runs), "example": example, **more}


def test_the_page_shows_columns_rows_diffs_and_the_first_right_step(client, owner, runs):
    a, b = runs
    client.force_login(owner)
    response = client.get(URL, query(runs))
    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('class="column-head"') == 2 and html.count('class="across-row"') == 4
    heads = re.findall(r'class="first-right small">(.*?)</div>', html)
    assert heads == ["first right at step <strong>2</strong>", "first right at step <strong>3</strong>"]
    assert html.count("first-right-mark") == 2
    assert "The answer is <del>3</del> <ins>4</ins>" in html
    assert "<summary>against the first column</summary>" in html
    inspector = reverse("runs:trajectories", args=[a.pk, 2])
    assert f'href="{inspector}?example=q1&amp;attempt=1" class="step-link"' in html
    assert f'href="{example_history_url(b.pk, "q1")}"' in html
    # Answers are escaped.
    assert "<script>" not in html


def test_a_column_without_the_example_says_so_and_retention_is_explained(client, owner, runs):
    a, _ = runs
    kept = run_with(owner, {s: {"q2": visit(("t", f"a{s}", 0.0))} for s in range(1, 9)},
                    config={"keep_rollouts_last_steps": 3})
    client.force_login(owner)
    html = client.get(URL, query([a, kept], "q1")).content.decode()
    assert f"Run {kept.pk} never drew this example." in html
    assert f"Run {kept.pk} keeps only the newest 3 steps&#x27; rollouts: steps before 6 have no texts." in html


def test_owner_viewer_staff_read_it_a_stranger_and_anonymous_do_not(client, owner, runs, stranger, staff, make_user):
    viewer = make_user("viewer")
    lab = project_create(creator=owner, name="lab")
    member_add(lab, user=viewer, role=Role.VIEWER)
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(project=lab)
    for user in (owner, viewer, staff):
        client.force_login(user)
        assert client.get(URL, query(runs)).status_code == 200, user
    client.force_login(stranger)
    response = client.get(URL, query(runs))
    assert response.status_code == 404 and b"No such run." in response.content
    # One readable run and one of a stranger's: as absent as a missing run.
    mine = run_with(stranger, B_VISITS)
    assert client.get(URL, query([mine, runs[0]])).status_code == 404
    assert client.get(URL, query([mine, 987654])).status_code == 404
    client.logout()
    response = client.get(URL, query(runs))
    assert response.status_code == 302 and response.url.startswith(reverse("login"))


def test_a_share_links_holder_reads_its_own_run_and_no_other(client, owner, runs):
    from webapp.sharing.services import share_link_create

    a, b = runs
    link = share_link_create(creator=owner, runs=[a])
    opened = client.get(reverse("sharing:open", args=[link.token]))
    assert opened.status_code == 302
    windows = {"runs": f"{a.pk}:1-2,{a.pk}:3-4", "example": "q1"}
    assert client.get(URL, windows).status_code == 200
    response = client.get(URL, query([a, b]))
    assert response.status_code == 302 and response.url.startswith(reverse("login"))


@pytest.mark.parametrize("params, message", [
    ({"example": "q1"}, "names 2 to 8 columns"),
    ({"runs": "{a}", "example": "q1"}, "names 2 to 8 columns"),
    ({"runs": "{a},x", "example": "q1"}, "&#x27;runs&#x27; takes run ids"),
    ({"runs": "{a}:5-1,{b}", "example": "q1"}, "is after its last step"),
    ({"runs": "{a},{b}"}, "&#x27;example&#x27; is required"),
    ({"runs": "{a},{b}", "example": "x" * 201}, "at most 200 characters"),
    ({"runs": "{a},{b}", "example": "q1", "align": "epoch"}, "&#x27;align&#x27; must be one of step, fraction"),
    ({"runs": "{a},{b}", "example": "q1", "solved": "1e400"}, "finite number"),
    ({"runs": "{a},{b}", "example": "q1", "solved": "most"}, "must be a number"),
])
def test_bad_input_is_a_400_with_its_message(client, owner, runs, params, message):
    a, b = runs
    client.force_login(owner)
    response = client.get(URL, {k: v.format(a=a.pk, b=b.pk) for k, v in params.items()})
    assert response.status_code == 400
    assert message in response.content.decode()


def test_runs_of_different_tasks_are_a_400_that_says_so(client, owner, runs):
    a, b = runs
    other = Task.objects.create(name="other-task", title="Other", program=make_program())
    Run.objects.filter(pk=b.pk).update(task=other)
    client.force_login(owner)
    response = client.get(URL, query(runs))
    assert response.status_code == 400 and "train different tasks" in response.content.decode()


def test_an_example_no_column_drew_is_a_404_with_words(client, owner, runs):
    client.force_login(owner)
    response = client.get(URL, query(runs, "nobody"))
    assert response.status_code == 404
    assert "No column drew example &#x27;nobody&#x27;" in response.content.decode()


def test_post_is_refused(client, owner, runs):
    client.force_login(owner)
    assert client.post(URL + "?" + "&".join(f"{k}={v}" for k, v in query(runs).items())).status_code == 405


def test_fraction_and_solved_round_trip_in_the_controls(client, owner, runs):
    client.force_login(owner)
    response = client.get(URL, query(runs, align="fraction", solved="0.25"))
    html = response.content.decode()
    assert response.status_code == 200
    assert '<option value="fraction" selected>' in html and 'value="0.25"' in html
    assert html.count("first-right-mark") == 2 and "first right at step <strong>1</strong>" in html


def test_the_history_page_offers_the_other_runs_of_the_task(client, owner, runs, stranger):
    a, b = runs
    run_with(stranger, B_VISITS)  # not readable: not offered
    never = run_with(owner, {1: {"q9": visit(("x", "y", 0.0))}})
    client.force_login(owner)
    html = client.get(example_history_url(a.pk, "q1")).content.decode()
    form = re.search(r'<form method="get" action="([^"]+)" id="across-form">(.*?)</form>', html, re.S)
    assert form.group(1) == URL
    assert re.findall(r'name="runs" value="(\d+)"', form.group(2)) == [str(a.pk), str(b.pk)]
    assert f'value="{never.pk}"' not in form.group(2)
    # What the form sends (runs repeated, as checkboxes send them) opens the page with this run first.
    response = client.get(URL, {"runs": [a.pk, b.pk], "example": "q1", "align": "step"})
    assert response.status_code == 200
    assert [c.run.pk for c in response.context["across"].columns] == [a.pk, b.pk]
    alone = client.get(example_history_url(never.pk, "q9")).content.decode()
    assert 'id="across-none"' in alone


def test_the_page_links_to_older_visits_when_capped(client, owner, runs, monkeypatch):
    from webapp.runs.examples import across

    monkeypatch.setattr(across, "VISITS_CAP", 3)
    a, b = runs
    client.force_login(owner)
    html = client.get(URL, query(runs)).content.decode()
    older = re.search(r'href="([^"]+)" id="older-visits"', html).group(1).replace("&amp;", "&")
    assert f"runs={a.pk}%3A-1%2C{b.pk}%3A-1" in older
    response = client.get(older)
    assert [[c.step for c in col.cells] for col in response.context["across"].columns] == [[1], [1]]


def test_query_count_does_not_grow_with_the_visits(client, owner, django_assert_max_num_queries):
    def pair(steps):
        return [run_with(owner, {s: {"q1": visit((f"r {s}", f"a {s}", s % 2))} for s in range(1, steps + 1)})
                for _ in range(2)]

    small, large = pair(2), pair(40)
    client.force_login(owner)
    with django_assert_max_num_queries(30) as counted:
        assert client.get(URL, query(small)).status_code == 200
    with django_assert_max_num_queries(len(counted.captured_queries)):
        response = client.get(URL, query(large))
    assert len(response.context["across"].rows) == 40


def test_hostile_values_with_readable_runs_give_a_page_a_400_or_a_404(client, owner, runs):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    a, b = runs
    client.force_login(owner)
    hostile = st.one_of(st.text(max_size=30), st.sampled_from(
        ["0", "-1", "1e308", "-inf", "NaN", "\x00", "9" * 40, "q1", "step", "fraction", f"{a.pk}:-", f"{a.pk}:0-",
         f"{a.pk}:{'9' * 19}-", f"{a.pk}:{2**40}-", f"{a.pk}:0-{2**62}", str(2**62), "x" * 300, "%", "<script>"]))

    @settings(max_examples=80, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(example=hostile, align=hostile, solved=hostile, extra=hostile)
    def fuzz(example, align, solved, extra):
        for params in ({"runs": f"{a.pk},{b.pk}", "example": example, "align": align, "solved": solved},
                       {"runs": f"{a.pk},{b.pk},{extra}", "example": "q1"},
                       {"runs": [str(a.pk), extra], "example": "q1", "solved": solved}):
            response = client.get(URL, params)
            assert response.status_code in (200, 400, 404), (params, response.status_code)

    fuzz()
