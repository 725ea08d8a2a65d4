"""Projects and share links in a real browser against the real ASGI app: a member watches a teammate's
run trained elsewhere grow live; a share link opens a run's charts and trajectory inspector in a
browser that never logged in (and nothing else); an anonymous link shows no owner, host or path, on
load and live; the members page and the runs table's project switcher (the README's screenshots)."""

import datetime as dt
import json
import math
import re
import urllib.request

import pytest
from django.utils import timezone

from tests.browser.session import PASSWORD, log_in, off_playwright_thread
from tests.suites import UI_ONLY
from tests.webapp.runs.seeding import error_step_event, hover_step_event, ingest, make_run
from webapp.api.services import token_create
from webapp.projects.models import Role
from webapp.projects.services import member_add, project_create
from webapp.runs.ingest.external import external_run_start, external_steps_log
from webapp.runs.ingest.store import step_events_ingest
from webapp.runs.live.notices import StatusNotice, notice_send
from webapp.runs.models import Run
from webapp.sharing.models import ShareLink
from webapp.sharing.services import share_link_create

pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=UI_ONLY), pytest.mark.django_db(transaction=True)]

# What an anonymous link must never show: a distinctive owner, host and home folder.
OWNER = "alice-in-wonderland"
HOST = "gpu-node-17.lab.example"
HOME = f"/home/{OWNER}/checkpoints/run-7"


@pytest.fixture
def fresh_page(browser, asgi_server):
    """A page in a browser context of its own: no cookies, never logged in (after asgi_server, so it is
    closed before the server's teardown, as `page` is)."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    yield page
    context.close()


def lab(make_user, *members: tuple[str, str]):
    """Project lab-p made by ada (its admin), with `members` as (name, role); the users by name."""
    users = {"ada": make_user("ada", password=PASSWORD)}
    project = project_create(creator=users["ada"], name="lab-p", title="Reasoning lab")
    for name, role in members:
        users[name] = make_user(name, password=PASSWORD)
        member_add(project, user=users[name], role=role)
    return project, users


def logged_step(step):
    """One prompt x 2 completions, as TRL's callback sends them."""
    rollouts = [{"prompt": [{"role": "user", "content": "Repeat: word"}], "completion": f"word try {i}.",
                 "rewards": {"regex_match": 1.0, "exact_match": float(i == step % 2)}, "advantage": 0.5 - i,
                 "group": 0} for i in range(2)]
    return {"step": step, "metrics": {"loss": 0.1 * step}, "rollouts": rollouts}


def post(url, key, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def points(page, chart: str, count: int) -> None:
    """Waits until the run page's chart `chart` has drawn `count` steps."""
    page.wait_for_function(f"() => document.querySelector('#{chart}')?.dataset.points === '{count}'")


def socket_open(page) -> None:
    """Waits until the run page's websocket is open: the server has joined it to the run's watchers,
    so a notice sent from now on reaches the page (run-live.js keeps the page's state in cohortRun)."""
    page.wait_for_function("() => window.cohortRun?.socket?.readyState === WebSocket.OPEN")


def test_a_member_watches_a_teammates_run_trained_elsewhere_grow_live(page, asgi_server, make_user):
    project, users = lab(make_user, ("alice", Role.MEMBER), ("mo", Role.MEMBER))
    key = token_create(user=users["alice"], name="trl", project=project)[1]  # scoped to lab-p, read and write
    run, _ = external_run_start(users["alice"], client_id="trl-lab", task="toy_format", name="alice trl run",
                                origin="trl", project=project)
    external_steps_log(run, [logged_step(1)])
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    log_in(page, asgi_server, "mo")
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    points(page, "chart-reward", 1)
    assert page.inner_text("#run-step") == "1"
    assert page.inner_text("#run-owner") == "alice" and page.inner_text("#run-project") == "lab-p"
    # A member reads a teammate's run and changes nothing of it: no edit, share, archive or delete.
    for control in ("#run-edit", "#share-link", "#archive-form", "#delete-link"):
        assert page.locator(control).count() == 0, control

    socket_open(page)
    # alice's trainer posts step 2 with her project-scoped token: mo's open page draws it.
    off_playwright_thread(lambda: post(f"{asgi_server}/api/runs/{run.pk}/steps/", key, {"steps": [logged_step(2)]}))
    points(page, "chart-reward", 2)
    page.wait_for_function("() => document.getElementById('run-step').textContent === '2'")
    assert run.step_metrics.count() == 2
    assert errors == []


def test_a_share_link_opens_the_runs_charts_and_inspector_without_an_account_and_nothing_else(
        fresh_page, asgi_server, make_user):
    project, users = lab(make_user, ("alice", Role.MEMBER))
    run = make_run(users["alice"], project=project, state=Run.State.RUNNING, name="hover mmgrpo",
                   config={"strategy": "mmgrpo", "padding": "fill"})
    ingest(run, [hover_step_event(s, seed=3) for s in (1, 2)])
    link = share_link_create(creator=users["alice"], runs=[run], label="co-author")
    page = fresh_page
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    # The link remembers itself in this browser and lands on the run page, which draws its charts.
    page.goto(f"{asgi_server}/share/{link.token}/")
    page.wait_for_url(f"{asgi_server}/runs/{run.pk}/")
    points(page, "chart-reward", 2)
    assert "Shared with you through a read-only link." in page.inner_text("#shared-note")
    assert page.inner_text("#run-owner") == "alice"  # not anonymous: the owner is named
    for control in ("#run-edit", "#share-link", "#archive-form", "#delete-link", "#cancel-form"):
        assert page.locator(control).count() == 0, control
    # Live for the link holder too: a step stored now reaches the open page over the websocket.
    socket_open(page)
    off_playwright_thread(lambda: step_events_ingest(run, [hover_step_event(3, seed=3)]))  # its notices go on its commit
    points(page, "chart-reward", 3)
    page.wait_for_function("() => document.getElementById('run-step').textContent === '3'")

    # The trajectory inspector of a step's example.
    page.goto(f"{asgi_server}/runs/{run.pk}/steps/2/trajectories?example=claim-0")
    page.wait_for_selector("#traj-grid")
    assert page.locator("#traj-grid tbody tr").count() >= 1
    assert "claim-0" in page.inner_text("body")

    # Nothing else: the runs list (and the projects page) send the link holder to log in.
    for path in ("/", "/projects/"):
        page.goto(f"{asgi_server}{path}")
        page.wait_for_url(re.compile(re.escape(f"{asgi_server}/login/")))
        assert page.locator("#id_username").count() == 1
    assert ShareLink.objects.get(pk=link.pk).uses == 1
    assert errors == []


def anonymous_lab(make_user):
    """A run of OWNER in lab-p with its worker's host and OWNER's home folder in its worker, config,
    error and notes, and stored rollouts (step 2's traceback names files); an anonymous link to it."""
    project, users = lab(make_user, (OWNER, Role.MEMBER))
    run = make_run(users[OWNER], project=project, state=Run.State.RUNNING, name="the shared run",
                   config={"strategy": "mhgpo", "model": f"{HOME}/base-model", "train_data": f"{HOME}/train.jsonl"},
                   worker=f"gpu0@{HOST}", checkpoint_dir=HOME, notes=f"{OWNER} started it on {HOST} from {HOME}",
                   error=f"worker gpu0@{HOST} wrote {HOME}/events.jsonl for {OWNER}")
    ingest(run, [hover_step_event(1), error_step_event(2)])
    link = share_link_create(creator=users[OWNER], runs=[run], anonymous=True, label="NeurIPS reviewers")
    return run, link


HIDDEN = (OWNER, HOST, "gpu0@", "/home/", "lab-p", "/work/", "site-packages")


def shown(page) -> str:
    """What the reader sees: the body's rendered text (the charts' SVG labels included) and the title."""
    return page.inner_text("body") + "\n" + page.title()


def test_an_anonymous_link_shows_no_owner_host_or_path(fresh_page, asgi_server, make_user):
    run, link = anonymous_lab(make_user)
    page = fresh_page
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    page.goto(f"{asgi_server}/share/{link.token}/")
    page.wait_for_url(f"{asgi_server}/runs/{run.pk}/")
    points(page, "chart-reward", 2)
    assert "(anonymous)" in page.inner_text("#shared-note")
    assert page.locator("#run-owner").count() == 0 and page.locator("#run-project").count() == 0
    # The error and the notes are there, without their paths or names.
    assert "<path>" in page.inner_text("#run-error") and "<hidden>" in page.inner_text("#run-error")
    assert "<hidden>" in page.inner_text("#run-notes")
    text = shown(page)
    for hidden in HIDDEN:
        assert hidden not in text, ("run page", hidden)

    # The trajectory inspector (the example whose rollout raised: its traceback is shown without paths),
    # another example's, the step page and the compare page of the run, each as drawn in the browser.
    failed = run.rollouts.filter(step=2).exclude(error="").first()
    for url, drawn in ((f"/runs/{run.pk}/steps/2/trajectories?example={failed.example_id}", "#rollout-errors"),
                       (f"/runs/{run.pk}/steps/1/trajectories?example=claim-0", "#traj-grid"),
                       (f"/runs/{run.pk}/steps/2/", "#groups"),
                       (f"/runs/compare?runs={run.pk}", "#compare-reward-mean[data-traces='1']")):
        page.goto(f"{asgi_server}{url}")
        page.wait_for_selector(drawn)
        assert page.url == f"{asgi_server}{url}"  # opened, not sent to log in
        if drawn == "#rollout-errors":
            assert "<path>" in page.inner_text("#rollout-errors") and "Traceback" in page.inner_text("#rollout-errors")
        text = shown(page)
        for hidden in HIDDEN:
            assert hidden not in text, (url, hidden)
    assert errors == []


def test_an_anonymous_links_open_page_shows_no_owner_or_host_when_the_run_fails_live(
        fresh_page, asgi_server, make_user):
    """The run page of an anonymous link stays open while the run fails: the error the worker reports
    over the websocket names the worker, its host and the owner's home folder, as the supervisor's
    status notice carries them (webapp/runs/live/notices.py `status_notices_send`, on every state change;
    a run trained elsewhere ends with its trainer's error the same way, `external_run_finish`)."""
    run, link = anonymous_lab(make_user)
    page = fresh_page
    page.goto(f"{asgi_server}/share/{link.token}/")
    page.wait_for_url(f"{asgi_server}/runs/{run.pk}/")
    points(page, "chart-reward", 2)
    socket_open(page)

    error = f"trainer on gpu0@{HOST} exited: CUDA out of memory in {HOME}/train.py (job of {OWNER})"

    def fail():
        fresh = Run.objects.get(pk=run.pk)
        assert fresh.transition(Run.State.FAILED, error=error)
        notice: StatusNotice = {"type": "status", "run": fresh.pk, "state": fresh.state,
                                "current_step": fresh.current_step, "error": fresh.error, "pruned_reason": ""}
        notice_send(fresh.pk, notice)

    off_playwright_thread(fail)
    page.wait_for_function("() => document.getElementById('run-state').textContent === 'failed'")
    page.wait_for_function("() => document.getElementById('run-error').textContent.includes('CUDA out of memory')")
    live, live_error = shown(page), page.inner_text("#run-error")
    page.reload()
    points(page, "chart-reward", 2)
    reloaded, reloaded_error = shown(page), page.inner_text("#run-error")
    assert [h for h in HIDDEN if h in reloaded] == [], reloaded_error
    assert [h for h in HIDDEN if h in live] == [], f"shown live: {live_error!r}; after a reload: {reloaded_error!r}"


# --- the README's screenshots ---------------------------------------------------------------------


def steps(count: int, *, scale: float):
    for step in range(1, count + 1):
        yield {"type": "step", "attempt": 1, "step": step,
               "metrics": {"reward/mean": scale * (1 - math.exp(-step / 8)), "kl": step / 1000}}


def test_the_members_page_and_the_runs_table_filtered_to_a_project(page, screenshot, asgi_server, make_user):
    """docs/screenshots/project-members.png and project-switcher.png are these screenshots
    (test-artifacts/, copied there by hand as the README's other screenshots are)."""
    project, users = lab(make_user, ("alice", Role.MEMBER), ("mo", Role.MEMBER), ("vi", Role.VIEWER),
                         ("bea", Role.ADMIN))
    now = timezone.now()
    grpo, gdpo = {"strategy": "grpo", "estimator": "grpo"}, {"strategy": "grpo", "estimator": "gdpo"}
    runs = [  # name, owner, state, config, reward scale, steps stored, total steps, started hours ago, hours run
        ("grpo baseline", "alice", Run.State.SUCCEEDED, grpo, 0.55, 60, 60, 30, 2.5),
        ("gdpo two rewards", "alice", Run.State.SUCCEEDED, gdpo, 0.82, 60, 60, 26, 2.6),
        ("mmgrpo hover", "mo", Run.State.RUNNING, {"strategy": "mmgrpo", "estimator": "grpo"}, 0.47, 18, 60, 1, None),
        ("mhgpo fork", "bea", Run.State.FAILED, {"strategy": "mhgpo", "estimator": "grpo"}, 0.31, 9, 40, 5, 0.4),
        ("lr sweep 3e-5", "ada", Run.State.QUEUED, {**grpo, "learning_rate": 3e-5}, 0.0, 0, 60, None, None),
    ]
    tags = {"grpo baseline": ["baseline", "paper"], "gdpo two rewards": ["paper"], "lr sweep 3e-5": ["sweep"]}
    for name, who, state, config, scale, count, total, ago, hours in runs:
        started = now - dt.timedelta(hours=ago) if ago is not None else None
        finished = started + dt.timedelta(hours=hours) if hours is not None else None
        run = make_run(users[who], project=project, name=name, state=state, config=config, tags=tags.get(name, []),
                       started_at=started, finished_at=finished, gpus=1 if started else 0)
        Run.objects.filter(pk=run.pk).update(total_steps=total)
        if count:
            ingest(run, steps(count, scale=scale))
    make_run(users["ada"], name="ada's scratch run", state=Run.State.SUCCEEDED)  # in her personal project

    log_in(page, asgi_server, "ada")
    page.goto(f"{asgi_server}/projects/lab-p/members")
    rows = page.locator("#members-table tr.member")
    assert rows.count() == 5
    assert {r: page.get_attribute(f'#members-table tr[data-user="{r}"]', "data-role") for r in users} == {
        "ada": "admin", "alice": "member", "mo": "member", "vi": "viewer", "bea": "admin"}
    assert page.inner_text("#my-role") == "admin" and page.locator("#member-add").count() == 1
    path = screenshot("project-members")
    assert path.stat().st_size > 10_000

    page.goto(f"{asgi_server}/")
    assert "ada's scratch run" in page.inner_text("#runs-table")  # every project of hers at first
    assert "lab-p" in page.locator("#runs-table td.project-cell").all_inner_texts()
    page.select_option("#project-switcher", "lab-p")
    page.wait_for_url(re.compile(r"[?&]project=lab-p"))
    assert page.inner_text("#project-heading") == "lab-p"
    names = page.locator("#runs-table tbody a.run-link").all_inner_texts()
    assert sorted(names) == sorted(r[0] for r in runs)
    assert page.locator("#runs-table td.project-cell").count() == 0  # one project: its column would repeat it
    page.set_viewport_size({"width": 1360, "height": 520})  # no empty space under the table
    path = screenshot("project-switcher")
    assert path.stat().st_size > 10_000
