"""Share links: who makes them, what they open without an account (and nothing else), anonymous links
without names, hosts or paths (exports included), expiry, revocation, use counts."""

import datetime as dt
import json

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.webapp.runs.seeding import error_step_event, hover_step_event, ingest, make_run
from webapp.projects.models import Role
from webapp.projects.services import member_add, project_create
from webapp.runs.models import Run
from webapp.runs.services import run_directory
from webapp.sharing.models import ShareLink
from webapp.sharing.services import share_link_create

pytestmark = pytest.mark.django_db

OWNER = "alice-in-wonderland"
HOST = "gpu-node-17.lab.example"
PATH = "/home/alice-in-wonderland/checkpoints/run-7"


@pytest.fixture
def lab(make_user, settings, tmp_path):
    settings.COHORT_RUNS_DIR = tmp_path / "runs"
    users = {name: make_user(name) for name in (OWNER, "ada", "mo", "vi")}
    p = project_create(creator=users["ada"], name="lab-p")
    for name, role in ((OWNER, Role.MEMBER), ("mo", Role.MEMBER), ("vi", Role.VIEWER)):
        member_add(p, user=users[name], role=role)
    run = make_run(users[OWNER], project=p, state=Run.State.SUCCEEDED, name="the shared run",
                   config={"strategy": "mhgpo", "model": f"{PATH}/base-model", "train_data": f"{PATH}/train.jsonl"},
                   worker=f"gpu0@{HOST}", checkpoint_dir=PATH,
                   error=f"worker gpu0@{HOST} wrote {PATH}/events.jsonl for {OWNER}")
    ingest(run, [hover_step_event(1), error_step_event(2)])
    other = make_run(users[OWNER], project=p, name="not shared")
    adapter = run_directory(run.pk) / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    return {**users, "p": p, "run": run, "other": other}


def opened(link) -> Client:
    browser = Client()
    response = browser.get(reverse("sharing:open", args=[link.token]))
    assert response.status_code == 302
    return browser


def test_the_owner_or_an_admin_shares_a_run_and_a_member_or_viewer_cannot(client, lab):
    url = f"{reverse('sharing:new')}?runs={lab['run'].pk}"
    for who, status in ((OWNER, 200), ("ada", 200), ("mo", 403), ("vi", 403)):
        client.force_login(lab[who])
        assert client.get(url).status_code == status, who
    client.force_login(lab[OWNER])
    response = client.post(url, {"label": "co-author", "days": 30})
    assert response.status_code == 302
    link = ShareLink.objects.get()
    assert (link.created_by, list(link.runs.all()), link.anonymous, link.allow_adapter) == (
        lab[OWNER], [lab["run"]], False, False)
    assert abs((link.expires_at - timezone.now()) - dt.timedelta(days=30)) < dt.timedelta(minutes=1)
    listing = client.get(response["Location"]).content.decode()
    assert link.token in listing and 'class="num uses">0<' in listing
    bad = client.post(url, {"days": 0})
    assert bad.status_code == 400 and 'id="error-days"' in bad.content.decode()


def test_a_link_opens_the_runs_pages_without_a_login_and_nothing_else(lab):
    link = share_link_create(creator=lab[OWNER], runs=[lab["run"]])
    browser = opened(link)
    run = lab["run"]
    for name, args, query in (("runs:detail", [run.pk], ""), ("runs:metrics", [run.pk], "?after=0"),
                              ("runs:step", [run.pk, 1], ""), ("runs:heatmap", [run.pk], ""), ("runs:timeline", [run.pk], ""),
                              ("runs:export_metrics", [run.pk], ""), ("runs:export_rollouts", [run.pk], ""),
                              ("runs:compare", [], f"?runs={run.pk}")):
        assert browser.get(reverse(name, args=args) + query).status_code == 200, name
    page = browser.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert 'id="shared-note"' in page and 'id="cancel-form"' not in page and 'id="run-edit"' not in page
    for url in (reverse("runs:detail", args=[lab["other"].pk]), reverse("runs:list"), reverse("projects:list"),
                reverse("api:tokens"), reverse("runs:adapter", args=[run.pk])):
        response = browser.get(url)
        assert response.status_code in (302, 404), url
        if response.status_code == 302:
            assert response["Location"].startswith(reverse("login")), url
    assert browser.get(reverse("api:run", args=[run.pk])).status_code == 401  # the API needs an account
    assert ShareLink.objects.get().uses == 1


def test_the_adapter_download_needs_the_box_ticked(lab):
    without = opened(share_link_create(creator=lab[OWNER], runs=[lab["run"]]))
    assert without.get(reverse("runs:adapter", args=[lab["run"].pk])).status_code == 404
    with_adapter = opened(share_link_create(creator=lab[OWNER], runs=[lab["run"]], allow_adapter=True))
    response = with_adapter.get(reverse("runs:adapter", args=[lab["run"].pk]))
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"


def test_a_wrong_expired_or_revoked_link_is_the_same_404_as_one_that_never_existed(client, lab):
    link = share_link_create(creator=lab[OWNER], runs=[lab["run"]])
    browser = opened(link)  # it opened while valid
    client.force_login(lab[OWNER])
    client.post(reverse("sharing:revoke", args=[link.pk]))
    expired = share_link_create(creator=lab[OWNER], runs=[lab["run"]])
    ShareLink.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    gone = share_link_create(creator=lab[OWNER], runs=[lab["run"]])
    gone_token = gone.token
    Run.objects.filter(pk=lab["run"].pk).delete()  # its run is gone too
    answers = [Client().get(reverse("sharing:open", args=[token])) for token in (
        link.token, expired.token, gone_token, link.token[:-3] + "abc", "12.nosuchsecret~forged", "x")]
    assert {r.status_code for r in answers} == {404}
    assert len({r.content for r in answers}) == 1  # the same page, whatever was wrong
    assert browser.get(reverse("runs:detail", args=[lab["run"].pk])).status_code == 302  # revoked: back to login


def test_an_anonymous_link_shows_no_owner_host_worker_or_path_anywhere(lab):
    run = lab["run"]
    browser = opened(share_link_create(creator=lab[OWNER], runs=[run], anonymous=True))
    example = run.rollouts.filter(step=2).exclude(error="").first()
    pages = [reverse("runs:detail", args=[run.pk]), reverse("runs:step", args=[run.pk, 2]),
             reverse("runs:trajectories", args=[run.pk, 2]) + f"?example={example.example_id}",
             reverse("runs:export_rollouts", args=[run.pk]), reverse("runs:export_metrics", args=[run.pk]),
             reverse("runs:compare") + f"?runs={run.pk}"]
    for url in pages:
        response = browser.get(url)
        assert response.status_code == 200, url
        body = (b"".join(response.streaming_content) if response.streaming else response.content).decode()
        for hidden in (OWNER, HOST, "gpu0@", "/home/", "lab-p", "/work/", "site-packages"):
            assert hidden not in body, (url, hidden)
    exported = [json.loads(line) for line in b"".join(browser.get(pages[3]).streaming_content).splitlines()]
    assert any("<path>" in r["error"] for r in exported if r["error"])  # the traceback is there, without paths


def test_a_compare_link_opens_its_runs_and_a_compare_of_other_runs_is_refused(client, lab):
    second = make_run(lab["mo"], project=lab["p"], name="mo's baseline")
    client.force_login(lab["mo"])  # a member shares a compare view of runs of the project
    response = client.post(reverse("sharing:new"), {"runs": [lab["run"].pk, second.pk], "metrics": ["reward/mean"],
                                                    "days": 7})
    assert response.status_code == 302
    link = ShareLink.objects.get()
    assert link.view == ShareLink.View.COMPARE
    browser = Client()
    landing = browser.get(reverse("sharing:open", args=[link.token]))
    assert landing.status_code == 302 and "/runs/compare?" in landing["Location"]
    page = browser.get(landing["Location"])
    assert page.status_code == 200 and "mo&#x27;s baseline" in page.content.decode()
    assert browser.get(reverse("runs:detail", args=[second.pk])).status_code == 200
    assert browser.get(reverse("runs:compare") + f"?runs={lab['other'].pk}").status_code == 302
    client.force_login(lab["vi"])  # a viewer shares nothing
    assert client.post(reverse("sharing:new"), {"runs": [lab["run"].pk, second.pk], "days": 7}).status_code == 403


def test_the_list_shows_each_links_use_count_and_only_its_makers_links(client, lab):
    link = share_link_create(creator=lab[OWNER], runs=[lab["run"]], label="for the reviewers")
    for _ in range(3):
        opened(link)
    client.force_login(lab[OWNER])
    page = client.get(reverse("sharing:list")).content.decode()
    assert "for the reviewers" in page and 'class="num uses">3<' in page
    client.force_login(lab["ada"])
    assert "for the reviewers" not in client.get(reverse("sharing:list")).content.decode()
    assert client.post(reverse("sharing:revoke", args=[link.pk])).status_code == 404
