"""The runs table: sort, archive, delete, editing labels, pagination with a constant
number of queries, and who may do what (owner and staff; a stranger gets a 404). Its search: test_table_search.py."""

import datetime as dt
import importlib

import pytest
from django.apps import apps as django_apps
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from tests.webapp.runs.factories import make_task
from tests.webapp.runs.seeding import ingest, make_run, mhgpo_step_event
from tests.webapp.runs.table_world import LIST, config, names
from webapp.projects.selectors import personal_project
from webapp.runs.models import Group, GroupMember, ModuleCall, Rollout, Run, StepMetric
from webapp.runs.table.views import PAGE_SIZE, duration_text

pytestmark = pytest.mark.django_db

# --- sorting --------------------------------------------------------------------------------------


def test_default_order_is_newest_first(client, owner, table):
    client.force_login(owner)
    assert names(client) == ["delta sweep", "gamma", "beta", "alpha"]


@pytest.mark.parametrize(("sort", "expected"), [
    ("-best_reward", ["gamma", "delta sweep", "alpha", "beta"]),  # a run without a reward comes last
    ("best_reward", ["alpha", "delta sweep", "gamma", "beta"]),   # ... either way
    ("name", ["alpha", "beta", "delta sweep", "gamma"]),
    ("-name", ["gamma", "delta sweep", "beta", "alpha"]),
    ("-duration", ["gamma", "delta sweep", "beta", "alpha"]),     # never started: last, newest first
    ("-gpu_hours", ["gamma", "delta sweep", "beta", "alpha"]),    # 3 h x 2 GPUs, 1 h x 0 GPUs
    ("-last_eval_reward", ["gamma", "delta sweep", "beta", "alpha"]),
    ("state", ["delta sweep", "alpha", "beta", "gamma"]),         # failed, queued, queued, succeeded
])
def test_sort_by_a_column(client, owner, table, sort, expected):
    client.force_login(owner)
    assert names(client, sort=sort) == expected


def test_a_header_link_sorts_and_a_second_click_reverses(client, owner, table):
    client.force_login(owner)
    page = client.get(LIST).content.decode()
    assert "sort=-best_reward" in page  # numbers sort high to low first
    page = client.get(LIST, {"sort": "-best_reward"}).content.decode()
    assert 'href="?sort=best_reward"' in page and "Best reward ▼" in page


@pytest.mark.parametrize("sort", ["config", "password", "-", "owner__password", "best_reward;drop"])
def test_an_unknown_sort_is_a_400_that_names_the_keys(client, owner, table, sort):
    client.force_login(owner)
    response = client.get(LIST, {"sort": sort})
    assert response.status_code == 400
    body = response.content.decode()
    assert "Cannot sort by" in body and "best_reward" in body


# --- archive --------------------------------------------------------------------------------------


def test_archived_runs_are_hidden_until_asked_for(client, owner, table):
    client.force_login(owner)
    response = client.post(reverse("runs:archive", args=[table["a"].pk]), {"next": LIST})
    assert response.status_code == 302 and response.url == LIST
    assert "alpha" not in names(client)
    assert "alpha" in names(client, archived="on")
    client.post(reverse("runs:unarchive", args=[table["a"].pk]))
    assert "alpha" in names(client)


def test_bulk_archive_asks_first_then_archives_the_selection(client, owner, table):
    client.force_login(owner)
    ids = [table["a"].pk, table["b"].pk]
    page = client.get(reverse("runs:actions"), {"action": "archive", "runs": ids})
    assert page.status_code == 200 and "Archive 2 runs" in page.content.decode()
    assert Run.objects.filter(archived_at__isnull=False).count() == 0  # a GET changes nothing
    response = client.post(reverse("runs:actions"), {"action": "archive", "runs": ids})
    assert response.status_code == 302
    assert sorted(names(client)) == ["delta sweep", "gamma"]
    client.post(reverse("runs:actions"), {"action": "unarchive", "runs": ids})
    assert len(names(client)) == 4


@pytest.mark.parametrize(("params", "status"), [
    ({"action": "explode", "runs": [1]}, 400),
    ({"action": "archive", "runs": ["x"]}, 400),
    ({"action": "archive"}, 400),
])
def test_bad_action_requests_are_400(client, owner, table, params, status):
    client.force_login(owner)
    assert client.post(reverse("runs:actions"), params).status_code == status
    assert client.get(reverse("runs:actions"), params).status_code == status


# --- delete ---------------------------------------------------------------------------------------


def test_delete_removes_the_rows_and_the_run_directory(client, owner, settings, tmp_path,
                                                       django_capture_on_commit_callbacks):
    settings.COHORT_RUNS_DIR = str(tmp_path / "runs")
    doomed = make_run(owner, name="doomed", state=Run.State.SUCCEEDED)
    kept = make_run(owner, name="kept", state=Run.State.SUCCEEDED)
    for run in (doomed, kept):
        ingest(run, [mhgpo_step_event(s) for s in (1, 2)])
        (tmp_path / "runs" / f"run-{run.pk}" / "checkpoints").mkdir(parents=True)
        (tmp_path / "runs" / f"run-{run.pk}" / "events.jsonl").write_text("{}\n")
    before = {m: m.objects.count() for m in (StepMetric, Rollout, ModuleCall, Group, GroupMember)}
    client.force_login(owner)
    confirm = client.get(reverse("runs:actions"), {"action": "delete", "runs": [doomed.pk]})
    assert confirm.status_code == 200 and "cannot be undone" in confirm.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("runs:actions"), {"action": "delete", "runs": [doomed.pk]})
    assert response.status_code == 302
    assert not Run.objects.filter(pk=doomed.pk).exists()
    for model, count in before.items():
        left = model.objects.count()
        assert 0 < left < count, model  # the doomed run's rows went, the kept run's stayed
    assert StepMetric.objects.filter(run=kept).count() == 2
    assert not (tmp_path / "runs" / f"run-{doomed.pk}").exists()
    assert (tmp_path / "runs" / f"run-{kept.pk}" / "events.jsonl").exists()


def test_a_run_without_a_directory_deletes_fine(client, owner, settings, tmp_path,
                                                django_capture_on_commit_callbacks):
    settings.COHORT_RUNS_DIR = str(tmp_path / "runs")
    run = make_run(owner, state=Run.State.CANCELLED)
    client.force_login(owner)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("runs:actions"), {"action": "delete", "runs": [run.pk],
                                                         "next": reverse("runs:detail", args=[run.pk])})
    assert response.status_code == 302 and response.url == LIST  # its own page is gone
    assert not Run.objects.filter(pk=run.pk).exists()


@pytest.mark.parametrize("state", [Run.State.QUEUED, Run.State.RUNNING, Run.State.CANCELLING])
def test_an_active_run_is_not_deleted(client, owner, settings, tmp_path, state):
    settings.COHORT_RUNS_DIR = str(tmp_path / "runs")
    active = make_run(owner, name="busy", state=state)
    done = make_run(owner, name="done", state=Run.State.SUCCEEDED)
    client.force_login(owner)
    confirm = client.get(reverse("runs:actions"), {"action": "delete", "runs": [active.pk, done.pk]}).content.decode()
    assert "cancel it first" in confirm and 'id="confirm-action" class="danger" disabled' in confirm
    response = client.post(reverse("runs:actions"), {"action": "delete", "runs": [active.pk, done.pk]})
    assert response.status_code == 409
    assert "still active: cancel first" in response.content.decode()
    assert Run.objects.filter(pk__in=[active.pk, done.pk]).count() == 2  # nothing deleted


# --- editing name, tags and notes -----------------------------------------------------------------


def test_owner_edits_name_tags_and_notes_after_launch(client, owner):
    run = make_run(owner, name="old", state=Run.State.RUNNING)
    client.force_login(owner)
    response = client.post(reverse("runs:edit", args=[run.pk]),
                           {"name": "new name", "tags": "Baseline, gdpo  sweep,baseline", "notes": "lr too high?",
                            "next": f"{LIST}?sort=name"})
    assert response.status_code == 302 and response.url == f"{LIST}?sort=name"
    run.refresh_from_db()
    assert (run.name, run.tags, run.notes) == ("new name", ["baseline", "gdpo", "sweep"], "lr too high?")
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "lr too high?" in page and 'class="tag"' in page


def test_an_outside_next_is_ignored(client, owner):
    run = make_run(owner)
    client.force_login(owner)
    response = client.post(reverse("runs:edit", args=[run.pk]), {"name": "x", "next": "https://evil.example/"})
    assert response.url == reverse("runs:detail", args=[run.pk])


@pytest.mark.parametrize(("data", "field", "message"), [
    ({"tags": "ok, not/ok"}, "tags", "Tags are letters, digits"),
    ({"tags": ", ".join(f"t{i}" for i in range(21))}, "tags", "At most 20 tags"),
    ({"tags": "x" * 41}, "tags", "at most 40 characters"),
    ({"name": "n" * 201}, "name", "at most 200 characters"),
])
def test_bad_labels_are_shown_next_to_their_field(client, owner, data, field, message):
    run = make_run(owner, name="keep", tags=["keep"])
    client.force_login(owner)
    response = client.post(reverse("runs:edit", args=[run.pk]), {"name": "keep", **data})
    assert response.status_code == 400
    body = response.content.decode()
    error = body[body.index(f'id="error-{field}"'):]
    assert message in error[:400]
    run.refresh_from_db()
    assert (run.name, run.tags) == ("keep", ["keep"])


def test_the_launch_form_takes_tags_and_notes(client, owner):
    from tests.webapp.runs.launch.test_launch import launch_data
    from webapp.runs.launch.catalog import catalog_sync
    from webapp.runs.models import Task

    catalog_sync()
    toy = Task.objects.get(name="toy")
    client.force_login(owner)
    response = client.post(reverse("runs:new"), launch_data(toy, steps=2, tags="first, toy", notes="smoke test"))
    assert response.status_code == 302
    run = Run.objects.get()
    assert (run.tags, run.notes) == (["first", "toy"], "smoke test")
    bad = client.post(reverse("runs:new"), launch_data(toy, steps=2, tags="Not Valid!"))
    assert bad.status_code == 400 and "Tags are letters" in bad.content.decode()


# --- who may do what ------------------------------------------------------------------------------


def posts(run) -> list[tuple[str, dict]]:
    return [
        (reverse("runs:edit", args=[run.pk]), {"name": "renamed", "tags": "t"}),
        (reverse("runs:archive", args=[run.pk]), {}),
        (reverse("runs:unarchive", args=[run.pk]), {}),
        (reverse("runs:actions"), {"action": "archive", "runs": [run.pk]}),
        (reverse("runs:actions"), {"action": "unarchive", "runs": [run.pk]}),
        (reverse("runs:actions"), {"action": "delete", "runs": [run.pk]}),
    ]


def test_every_post_is_owner_or_staff_only(client, owner, stranger, staff, settings, tmp_path):
    settings.COHORT_RUNS_DIR = str(tmp_path / "runs")
    for user, expected in ((None, 302), (stranger, 404), (owner, 302), (staff, 302)):
        run = make_run(owner, name="mine", state=Run.State.SUCCEEDED)
        client.logout()
        if user is not None:
            client.force_login(user)
        for url, data in posts(run):
            response = client.post(url, data)
            assert response.status_code == expected, (user, url)
            if user is None:
                assert response.url.startswith(reverse("login"))
        survived = Run.objects.filter(pk=run.pk).exists()
        assert survived == (expected != 302 or user is None), user  # only owner and staff deleted it
        if survived:
            run.refresh_from_db()
            assert run.name == "mine" and run.archived_at is None


def test_a_strangers_run_among_the_selection_is_a_404_for_the_whole_request(client, owner, stranger):
    mine, theirs = make_run(owner, state=Run.State.FAILED), make_run(stranger, state=Run.State.FAILED)
    client.force_login(owner)
    for method in (client.get, client.post):
        assert method(reverse("runs:actions"), {"action": "delete", "runs": [mine.pk, theirs.pk]}).status_code == 404
    assert Run.objects.count() == 2


def test_edit_needs_a_csrf_token(csrf_client, owner):
    run = make_run(owner, name="kept")
    csrf_client.force_login(owner)
    assert csrf_client.post(reverse("runs:edit", args=[run.pk]), {"name": "changed"}).status_code == 403
    run.refresh_from_db()
    assert run.name == "kept"


# --- pagination and query counts -----------------------------------------------------------------


def bulk_runs(owner, count: int, start: int = 0) -> None:
    task = make_task()
    now = timezone.now()
    project = personal_project(owner)  # bulk_create skips Run.save, which would default it
    Run.objects.bulk_create([
        Run(owner=owner, project=project, task=task, name=f"run {start + i:05d}", config=config(estimator="gdpo" if i % 3 else "grpo"),
            total_steps=4, best_reward=(i % 17) / 17 if i % 5 else None, tags=["bulk", f"t{i % 7}"],
            started_at=now - dt.timedelta(minutes=i), gpus=i % 3)
        for i in range(count)
    ], batch_size=1000)


REQUESTS = [{}, {"sort": "-best_reward"}, {"q": "estimator=gdpo tag:bulk"}, {"page": 2, "sort": "name"},
            {"archived": "on", "sort": "-gpu_hours"}]


@pytest.mark.parametrize("params", REQUESTS)
def test_query_count_is_the_same_for_20_and_2000_runs(client, owner, staff, django_assert_num_queries, params):
    bulk_runs(owner, 60)
    for user in (owner, staff):
        client.force_login(user)
        with CaptureQueriesContext(connection) as small:
            assert client.get(LIST, params).status_code == 200
        counts = len(small.captured_queries)
        bulk_runs(owner, 1940, start=60) if user is owner else None
        with django_assert_num_queries(counts):
            response = client.get(LIST, params)
        assert response.status_code == 200 and len(response.context["runs"]) == PAGE_SIZE


def test_pages_hold_50_rows_without_overlap(client, owner):
    bulk_runs(owner, 120)
    client.force_login(owner)
    seen = []
    for number in (1, 2, 3):
        response = client.get(LIST, {"page": number, "sort": "-best_reward"})
        seen += [r.pk for r in response.context["runs"]]
    assert len(seen) == len(set(seen)) == 120
    body = client.get(LIST, {"page": 3}).content.decode()
    assert "Runs 101–120 of 120" in body
    assert client.get(LIST, {"page": 99}).context["page"].number == 3  # past the end: the last page
    assert client.get(LIST, {"page": "x"}).status_code == 400


# --- what the table shows --------------------------------------------------------------------------


def test_a_row_shows_strategy_estimator_steps_rewards_duration_and_gpu_hours(client, owner, table):
    client.force_login(owner)
    response = client.get(LIST, {"q": "gamma"})
    row = response.content.decode().split(f'<tr data-run="{table["c"].pk}"')[1].split("</tr>")[0]
    for text in ("grpo / grpo", "0 / 4", "0.900", "0.700", "3h 00m", "6.00", owner.username, "toy"):
        assert text in row, text


@pytest.mark.parametrize(("seconds", "text"), [(None, "—"), (5, "5s"), (249, "4m 09s"), (3900, "1h 05m"),
                                               (2 * 86400 + 3 * 3600 + 60, "2d 3h")])
def test_durations_read_at_a_glance(seconds, text):
    assert duration_text(None if seconds is None else dt.timedelta(seconds=seconds)) == text


def test_the_migration_fills_last_and_best_rewards_from_stored_steps(owner):
    run = make_run(owner)
    rows = [(1, {"reward/mean": 0.3}), (2, {"reward/mean": 0.8, "eval/reward/mean": 0.5}),
            (3, {"reward/mean": None}), (4, {"reward/mean": 0.4}), (5, {"loss": 1.0})]
    StepMetric.objects.bulk_create([StepMetric(run=run, attempt=1, step=s, seq=s, metrics=m) for s, m in rows])
    untouched = make_run(owner)
    migration = importlib.import_module("webapp.runs.migrations.0006_run_table")

    class Editor:
        pass

    editor = Editor()
    editor.connection = connection
    migration.fill_rewards(django_apps, editor)
    run.refresh_from_db()
    untouched.refresh_from_db()
    assert (run.best_reward, run.last_reward, run.last_eval_reward) == (0.8, 0.4, 0.5)
    assert (untouched.best_reward, untouched.last_reward, untouched.last_eval_reward) == (None, None, None)
