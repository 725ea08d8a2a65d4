"""Paths a user names for a run to read (issue 35): `program_state` must lie in a folder this user may
read from (their states, their runs, an admin's local roots), never another user's run or the
server's own files; refused beside the field, in the API, and again when a worker claims the run."""

import json
import os

import pytest
from django.urls import reverse

from tests.webapp.limits.test_limits import toy_config
from tests.webapp.runs.launch.test_launch import launch_data, toy_task  # noqa: F401 (fixture)
from webapp.limits.models import AllowedModel
from webapp.limits.user_paths import program_state_refusal, program_states_folder
from webapp.runs.launch.check import Launch
from webapp.runs.launch.limits import user_may_read_run
from webapp.runs.models import Run
from webapp.runs.services import run_claim, run_create

pytestmark = pytest.mark.django_db

STATE = {"predict": {"signature": {"instructions": "Answer briefly."}, "demos": []}}


def refusal(user, path: str) -> str | None:
    """The check as launch and claim run it: the runs app says whose run a run folder is."""
    return program_state_refusal(user, path, may_read_run=user_may_read_run)


@pytest.fixture
def runs_dir(tmp_path, settings):
    settings.COHORT_RUNS_DIR = tmp_path / "runs"
    settings.COHORT_RUNS_DIR.mkdir()
    return settings.COHORT_RUNS_DIR


def phase_one_state(run) -> str:
    """The file a run's prompt optimization (phase 1) writes in its folder."""
    from django.conf import settings

    path = settings.COHORT_RUNS_DIR / str(run.pk) / "prompt-optimization" / "program_state.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(STATE))
    return str(path)


def test_a_state_from_ones_own_run_is_allowed_and_from_another_users_run_is_refused(
        runs_dir, owner, stranger, staff, toy_task):  # noqa: F811
    mine = phase_one_state(run_create(Launch(owner=owner, task=toy_task, config=toy_config())))
    theirs = phase_one_state(run_create(Launch(owner=stranger, task=toy_task, config=toy_config())))
    assert refusal(owner, mine) is None
    assert "is not yours to read" in refusal(owner, theirs)
    assert refusal(staff, theirs) is None  # staff may name any run's


def test_states_sent_through_the_api_are_their_senders(runs_dir, owner, stranger):
    mine = program_states_folder(owner) / ("a" * 64 + ".json")
    theirs = program_states_folder(stranger) / ("b" * 64 + ".json")
    legacy = runs_dir / "program-states" / ("c" * 64 + ".json")  # stored before states were per user
    for path in (mine, theirs, legacy):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(STATE))
    assert refusal(owner, str(mine)) is None
    assert "is not yours to read" in refusal(owner, str(theirs))
    assert refusal(owner, str(legacy)) is None
    other = runs_dir / "program-states" / "notes.json"
    other.write_text("{}")
    assert "is not yours to read" in refusal(owner, str(other))


def test_the_servers_own_files_and_unsafe_paths_are_refused(runs_dir, owner, staff, settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"
    secret = settings.VAR_DIR / "cohort.sqlite3"
    secret.parent.mkdir()
    secret.write_text("database")
    for user in (owner, staff):
        assert "inside the server's own files" in refusal(user, str(secret))
        assert "may not contain '..'" in refusal(user, f"{runs_dir}/1/../../var/cohort.sqlite3")
        assert "must be an absolute path" in refusal(user, "states/program_state.json")
        assert "control characters" in refusal(user, "/srv/state\n.json")
    code = os.path.join(settings.BASE_DIR, "pyproject.toml")
    assert "inside the server's own files" in refusal(staff, code)


def test_an_admins_local_root_is_allowed_and_a_symlink_out_of_it_is_not(runs_dir, owner, stranger, toy_task,  # noqa: F811
                                                                       tmp_path):
    root = tmp_path / "shared-states"
    root.mkdir()
    state = root / "state.json"
    state.write_text(json.dumps(STATE))
    assert "is not yours to read" in refusal(owner, str(state))
    AllowedModel.objects.create(kind=AllowedModel.Kind.LOCAL_ROOT, value=str(root))
    assert refusal(owner, str(state)) is None
    assert "is not a file" in refusal(owner, str(root / "missing.json"))
    theirs = phase_one_state(run_create(Launch(owner=stranger, task=toy_task, config=toy_config())))
    (root / "link.json").symlink_to(theirs)
    refused = refusal(owner, str(root / "link.json"))
    assert "is not yours to read" in refused and f"(really {theirs})" in refused


def test_the_form_shows_the_refusal_beside_the_field_and_queues_nothing(client, runs_dir, owner, stranger,
                                                                        toy_task):  # noqa: F811
    theirs = phase_one_state(run_create(Launch(owner=stranger, task=toy_task, config=toy_config())))
    client.force_login(owner)
    response = client.post(reverse("runs:new"), launch_data(toy_task, program_state=theirs))
    assert response.status_code == 400
    assert "is not yours to read" in response.context["form"].errors["program_state"][0]
    assert not Run.objects.filter(owner=owner).exists()


def test_the_api_refuses_it_with_the_fields_error(runs_dir, owner, stranger, toy_task):  # noqa: F811
    from webapp.api.launch_body import launch_body, launch_from_body
    from webapp.runs.launch.check import LaunchRefused

    theirs = phase_one_state(run_create(Launch(owner=stranger, task=toy_task, config=toy_config())))
    with pytest.raises(LaunchRefused) as refused:
        launch_from_body(owner, launch_body(owner, {"task": toy_task.name, "config": {"program_state": theirs}}))
    assert "is not yours to read" in refused.value.errors["program_state"][0]


def test_a_worker_checks_it_again_at_claim(runs_dir, owner, toy_task, tmp_path):  # noqa: F811
    root = tmp_path / "shared-states"
    root.mkdir()
    (root / "state.json").write_text(json.dumps(STATE))
    entry = AllowedModel.objects.create(kind=AllowedModel.Kind.LOCAL_ROOT, value=str(root))
    run = run_create(Launch(owner=owner, task=toy_task, config=toy_config(program_state=str(root / "state.json"))))
    entry.delete()  # the admin took the root away while the run waited
    assert run_claim(run.pk, worker="gpu0@h") is None
    run.refresh_from_db()
    assert run.state == Run.State.FAILED and "is not yours to read" in run.error
