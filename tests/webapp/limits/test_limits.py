"""Launch limits: refused in the form (beside the field), in `launch_run` and at claim time; staff
bypass; a user's override beats its groups', and the most generous group wins."""

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.urls import reverse

from tests.webapp.runs.factories import make_run
from tests.webapp.runs.launch.test_launch import launch_data, toy_task  # noqa: F401 (fixture)
from trainer.config import RunConfig
from webapp.limits.models import LimitOverride
from webapp.limits.services import limits_for_user, run_token_budget
from webapp.runs.launch.check import Launch
from webapp.runs.launch.limits import limits_check_launch
from webapp.runs.models import Run
from webapp.runs.services import run_claim, run_create

pytestmark = pytest.mark.django_db

TOKEN_MESSAGE = ("This run would generate up to 40,960 tokens (steps x examples x rollouts x max_new_tokens); "
                 "your limit is 10,000.")


def toy_config(**changes) -> RunConfig:
    """A valid toy config: 40 steps x 1 example x 4 rollouts x 256 new tokens = 40,960 tokens."""
    values = {"program": "toy", "steps": 40, "examples_per_step": 1, "group_size": 4, "rollouts_per_example": 4,
              "max_new_tokens": 256, "max_context_length": 1024}
    values.update(changes)
    return RunConfig.from_dict(values)


@pytest.fixture
def tight(settings):
    settings.COHORT_LIMIT_TOKENS_PER_RUN = 10_000
    settings.COHORT_LIMIT_MAX_CONTEXT_LENGTH = 512
    settings.COHORT_LIMIT_ACTIVE_RUNS_PER_USER = 2
    settings.COHORT_LIMIT_QUEUED_RUNS_PER_USER = 1
    return settings


def test_the_token_budget_is_steps_times_examples_times_rollouts_times_new_tokens():
    assert run_token_budget(toy_config()) == 40 * 1 * 4 * 256 == 40_960


def test_the_form_shows_each_per_run_limit_beside_its_field(client, owner, toy_task, tight):  # noqa: F811
    client.force_login(owner)
    response = client.post(reverse("runs:new"), launch_data(toy_task, steps=40, examples_per_step=1,
                                                            group_size=4, rollouts_per_example=4,
                                                            max_new_tokens=256, max_context_length=1024))
    assert response.status_code == 400
    form = response.context["form"]
    assert form.errors["steps"] == [TOKEN_MESSAGE]
    assert form.errors["max_context_length"] == ["max_context_length 1,024 is over your limit of 512."]
    assert not Run.objects.exists()


def test_the_form_refuses_one_run_too_many_as_a_non_field_error(client, owner, toy_task, tight):  # noqa: F811
    tight.COHORT_LIMIT_TOKENS_PER_RUN = 10**9
    tight.COHORT_LIMIT_MAX_CONTEXT_LENGTH = 10**6
    make_run(owner)  # one queued: the queued limit (1) is reached
    client.force_login(owner)
    response = client.post(reverse("runs:new"), launch_data(toy_task))
    assert response.status_code == 400
    assert response.context["form"].non_field_errors() == [
        "You already have 1 queued runs; your limit is 1 queued runs at once."]
    make_run(owner, state=Run.State.RUNNING)
    errors = limits_check_launch(owner, toy_config())
    assert [e.field for e in errors] == [None, None]
    assert "You already have 2 active runs; your limit is 2" in errors[0].message


def test_launch_run_refuses_naming_the_limit(owner, toy_task, tight):  # noqa: F811
    with pytest.raises(CommandError, match="your limit is 10,000"):
        call_command("launch_run", "--task", "toy", "--owner", owner.username, "--set", "steps=40",
                     "--set", "max_new_tokens=256", "--set", "max_context_length=400")
    assert not Run.objects.exists()


def test_staff_bypass_every_limit(client, staff, toy_task, tight):  # noqa: F811
    make_run(staff)
    assert limits_check_launch(staff, toy_config()) == []
    call_command("launch_run", "--task", "toy", "--owner", staff.username, "--set", "steps=400")
    assert Run.objects.filter(owner=staff).count() == 2


def test_a_users_override_beats_its_groups_and_the_most_generous_group_wins(owner, tight):
    small, big = Group.objects.create(name="small"), Group.objects.create(name="big")
    owner.groups.add(small, big)
    LimitOverride.objects.create(group=small, tokens_per_run=20_000, max_context_length=600)
    LimitOverride.objects.create(group=big, tokens_per_run=50_000)
    limits = limits_for_user(owner)
    assert limits["tokens_per_run"] == 50_000  # the most generous group
    assert limits["max_context_length"] == 600  # only one group sets it
    assert limits["queued_runs"] == 1  # nobody sets it: the default
    assert [e.field for e in limits_check_launch(owner, toy_config())] == ["max_context_length"]
    LimitOverride.objects.create(user=owner, tokens_per_run=30_000, max_context_length=2048)
    limits = limits_for_user(owner)
    assert limits["tokens_per_run"] == 30_000  # the user's own row wins, even when smaller
    assert [e.message for e in limits_check_launch(owner, toy_config())] == [
        TOKEN_MESSAGE.replace("10,000", "30,000")]


def test_claim_fails_a_run_whose_owner_is_now_over_a_per_run_limit(owner, toy_task, settings):  # noqa: F811
    run = run_create(Launch(owner=owner, task=toy_task, config=toy_config()))  # allowed under the defaults
    settings.COHORT_LIMIT_TOKENS_PER_RUN = 10_000  # the admin lowered the limit meanwhile
    assert run_claim(run.pk, worker="w1") is None  # the worker gets nothing to train
    run.refresh_from_db()
    assert run.state == Run.State.FAILED and run.worker == "" and run.started_at is None
    assert "your limit is 10,000" in run.error and run.error.startswith("Refused at start")
    assert not run.step_metrics.exists()


def test_claim_does_not_count_the_claimed_run_against_the_active_limit(owner, toy_task, tight):  # noqa: F811
    tight.COHORT_LIMIT_TOKENS_PER_RUN = 10**9
    tight.COHORT_LIMIT_MAX_CONTEXT_LENGTH = 10**6
    tight.COHORT_LIMIT_ACTIVE_RUNS_PER_USER = 1
    run = run_create(Launch(owner=owner, task=toy_task, config=toy_config()))
    claimed = run_claim(run.pk, worker="w1")
    assert claimed is not None and claimed.state == Run.State.RUNNING
