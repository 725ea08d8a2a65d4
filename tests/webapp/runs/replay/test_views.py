"""The replay pages (webapp/runs/replay/views.py): the confirm page's cost for members, the refusals
(a viewer 403, a stranger 404, a share link and an anonymous browser the login page), bad G and calls,
a run whose adapter is gone or whose texts are gone, and the call's replays page."""

from __future__ import annotations

import html

import pytest
from django.test import Client
from django.urls import reverse

from tests.webapp.role_world import build_lab, link_holder
from tests.webapp.runs.seeding import ingest, make_run, mhgpo_step_event
from webapp.runs.models import CallText, ModuleCall, Replay
from webapp.runs.replay.services import replay_finish

pytestmark = pytest.mark.django_db


@pytest.fixture
def lab(make_user, settings, tmp_path):
    settings.COHORT_RUNS_DIR = tmp_path / "runs"
    return build_lab(make_user, settings.COHORT_RUNS_DIR)


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def body(response) -> str:
    return html.unescape(response.content.decode())


def confirm_url(run, call) -> str:
    return reverse("runs:replay_start", args=[run.pk, call.pk])


def first_call(run, position=0):
    return ModuleCall.objects.filter(rollout__run=run, position=position).order_by("rollout__index").first()


def test_members_see_the_cost_first_and_a_post_queues_one_replay_on_the_gpu_queue(lab, django_capture_on_commit_callbacks):
    call = first_call(lab.run)
    later = ModuleCall.objects.filter(rollout=call.rollout, position__gt=0).count()
    for caller in ("owner", "member", "admin", "staff"):
        page = signed_in(lab.users[caller]).get(confirm_url(lab.run, call), {"g": "5"})
        text = body(page)
        assert page.status_code == 200, caller
        assert f"<strong>{5 * (1 + later)}</strong> = G 5 × (1 + {later} later call" in text
        assert "the run's initial adapter (step 0), which sampled this step" in text and 'id="replay-start"' in text
    assert not Replay.objects.exists()  # a GET starts nothing
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = signed_in(lab.users["member"]).post(confirm_url(lab.run, call), {"group_size": "5"})
    assert response.status_code == 302 and len(callbacks) == 1  # the task, sent after the commit
    replay = Replay.objects.get()
    assert response["Location"].endswith(f"/calls/{call.pk}/replays/#replay-{replay.pk}")
    assert (replay.state, replay.group_size, replay.position, replay.requested_by) == (
        Replay.State.QUEUED, 5, 0, lab.users["member"])
    assert replay.cost["generations"] == 5 * (1 + later) and replay.adapter_step == 0


def test_a_viewer_is_refused_a_stranger_finds_nothing_and_a_link_or_no_account_must_sign_in(lab):
    call = first_call(lab.run)
    url = confirm_url(lab.run, call)
    viewer = signed_in(lab.users["viewer"])
    for response in (viewer.get(url), viewer.post(url, {"group_size": "2"})):
        assert response.status_code == 403 and "viewer" in body(response)
    inspector = viewer.get(reverse("runs:trajectories", args=[lab.run.pk, 1]), {"example": call.rollout.example_id})
    assert inspector.status_code == 200 and url not in body(inspector)  # no button for a viewer
    owner_page = signed_in(lab.users["owner"]).get(reverse("runs:trajectories", args=[lab.run.pk, 1]),
                                                   {"example": call.rollout.example_id})
    assert url in body(owner_page)
    assert signed_in(lab.users["other"]).get(url).status_code == 404
    for browser in (link_holder(lab, "valid"), Client()):
        for response in (browser.get(url), browser.post(url, {"group_size": "2"})):
            assert response.status_code == 302 and "/login/" in response["Location"]
    # the link's reader reads the replays page, without the button
    page = link_holder(lab, "valid").get(reverse("runs:call_replays", args=[lab.run.pk, call.pk]))
    assert page.status_code == 200 and 'id="replay-again"' not in body(page)
    assert not Replay.objects.exists()


@pytest.mark.parametrize("value", ["0", "17", "-1", "four", "2.5"])
def test_g_out_of_bounds_is_a_400_that_says_the_bounds(lab, value):
    owner = signed_in(lab.users["owner"])
    url = confirm_url(lab.run, first_call(lab.run))
    for response in (owner.get(url, {"g": value}), owner.post(url, {"group_size": value})):
        assert response.status_code == 400
        assert "from 1 to 16" in body(response)
    assert not Replay.objects.exists()


def test_a_call_of_another_run_or_none_at_all_is_a_404(lab):
    owner = signed_in(lab.users["owner"])
    other = make_run(lab.users["owner"], project=lab.p, config={"strategy": "mhgpo"})
    ingest(other, [mhgpo_step_event(1)])
    assert owner.get(confirm_url(lab.run, first_call(other))).status_code == 404
    assert owner.get(reverse("runs:replay_start", args=[lab.run.pk, 10**9])).status_code == 404
    assert owner.get(reverse("runs:call_replays", args=[lab.run.pk, 10**9])).status_code == 404


def test_a_run_whose_adapter_is_gone_says_so_and_refuses_the_start(lab):
    run = make_run(lab.users["owner"], project=lab.p, config={"strategy": "mhgpo", "model": "builtin:tiny"})
    ingest(run, [mhgpo_step_event(3)])  # sampled by the adapter after step 2: no checkpoint of it is kept
    call = first_call(run, position=1)
    owner = signed_in(lab.users["owner"])
    page = owner.get(confirm_url(run, call))
    text = body(page)
    assert page.status_code == 200 and "The run's adapter is gone" in text and 'id="replay-start"' not in text
    refused = owner.post(confirm_url(run, call), {"group_size": "2"})
    assert refused.status_code == 409 and "adapter is gone" in body(refused)
    assert not Replay.objects.exists()


def test_a_trajectory_whose_texts_are_gone_or_dropped_by_retention_says_so(lab):
    owner = signed_in(lab.users["owner"])
    run = make_run(lab.users["owner"], project=lab.p, config={"strategy": "mhgpo"})
    ingest(run, [mhgpo_step_event(1)])
    call = first_call(run, position=1)
    CallText.objects.filter(run=run).delete()
    page = body(owner.get(confirm_url(run, call)))
    assert "The texts of this trajectory are gone" in page and 'id="replay-start"' not in page

    kept = make_run(lab.users["owner"], project=lab.p, config={"strategy": "mhgpo", "keep_rollouts_last_steps": 1})
    ingest(kept, [mhgpo_step_event(1)])
    old = first_call(kept, position=1)
    ingest(kept, [mhgpo_step_event(2)])
    kept.refresh_from_db()
    response = owner.get(confirm_url(kept, old))
    assert "retention" in body(response)  # the rows are gone (404), or the page says why it refuses
    assert response.status_code in (200, 404)
    assert not Replay.objects.exists()


def test_the_replays_page_refreshes_while_one_waits_and_shows_a_failure_in_words(lab):
    call = first_call(lab.run)
    owner = signed_in(lab.users["owner"])
    owner.post(confirm_url(lab.run, call), {"group_size": "2"})
    replay = Replay.objects.get()
    url = reverse("runs:call_replays", args=[lab.run.pk, call.pk])
    page = body(owner.get(url))
    assert 'http-equiv="refresh"' in page and "Waiting for a worker" in page
    assert replay_finish(replay.pk, error="call 0 (create_query): the program builds another prompt than the stored "
                                          "one: it does not replay deterministically")
    page = body(owner.get(url))
    assert 'http-equiv="refresh"' not in page and "it does not replay deterministically" in page
    assert not replay_finish(replay.pk, error="again")  # an ended replay stays as it ended


def test_a_users_waiting_replays_count_against_their_queued_runs_limit(lab, settings):
    settings.COHORT_LIMIT_QUEUED_RUNS_PER_USER = 1
    member = signed_in(lab.users["member"])
    url = confirm_url(lab.run, first_call(lab.run))
    assert member.post(url, {"group_size": "2"}).status_code == 302
    refused = member.post(url, {"group_size": "2"})
    assert refused.status_code == 409 and "your limit is 1 (the queued-runs limit)" in body(refused)
    assert Replay.objects.count() == 1
    replay_finish(Replay.objects.get().pk, error="done with")
    assert member.post(url, {"group_size": "2"}).status_code == 302  # an ended replay no longer counts


def test_the_estimate_uses_the_runs_last_replay_once_there_is_one(lab):
    call = first_call(lab.run)
    owner = signed_in(lab.users["owner"])
    owner.post(confirm_url(lab.run, call), {"group_size": "2"})
    replay_finish(Replay.objects.get().pk, result={"generations": 10, "sample_s": 5.0, "load_s": 3.0,
                                                   "adapter": {"step": 0}, "alternatives": [], "spread": {}})
    page = body(owner.get(confirm_url(lab.run, call), {"g": "4"}))
    later = ModuleCall.objects.filter(rollout=call.rollout, position__gt=0).count()
    assert f"about {3.0 + 0.5 * 4 * (1 + later):.1f} s" in page
    assert "this run's last replay: 0.50 s per generation and 3 s to load the model" in page
