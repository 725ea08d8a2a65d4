"""Phase 1 of a run that optimizes prompts first, on the dashboard side (issue 26, item 2): the
trainer's `prompts` events folded into the run's record, the run page's section, the form's check."""

import pytest
from django.urls import reverse

from tests.webapp.runs.factories import make_run
from tests.webapp.runs.launch.test_launch import launch_data, toy_task  # noqa: F401 (fixture)
from webapp.runs.ingest.prompt_phase import fold_prompt_events, run_record_prompt_events
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.models import Run, Task

pytestmark = pytest.mark.django_db

STARTED = {"event": "started", "optimizer": "mipro_light", "model": "builtin:tiny", "attempt": 1}
CHOSEN = {"event": "chosen", "modules": {"solve": {"instructions": "Add the numbers.", "demos": [{"q": "1+1", "a": "2"}]}}}


def trial(n, score):
    return {"event": "trial", "trial": n, "score": score}


def test_events_fold_into_phase_trials_and_chosen_prompts():
    record = fold_prompt_events({}, [STARTED, trial(1, 20.0), trial(2, 40.0)])
    assert record == {"optimizer": "mipro_light", "model": "builtin:tiny", "phase": "prompts", "attempt": 1,
                      "trials": [{"trial": 1, "score": 20.0}, {"trial": 2, "score": 40.0}], "modules": {}}
    record = fold_prompt_events(record, [trial(2, 40.0), trial(3, 30.0), CHOSEN])  # trial 2 shipped twice
    assert [t["trial"] for t in record["trials"]] == [1, 2, 3]
    assert record["phase"] == "weights" and record["modules"] == CHOSEN["modules"]


def test_a_search_started_again_replaces_the_trials_of_the_one_it_repeats():
    record = fold_prompt_events({}, [STARTED, trial(1, 20.0)])
    again = fold_prompt_events(record, [{**STARTED, "attempt": 2}, trial(1, 50.0)])
    assert again["trials"] == [{"trial": 1, "score": 50.0}] and again["attempt"] == 2


def test_the_record_is_stored_on_the_run(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    assert run_record_prompt_events(run.pk, []) is None
    run_record_prompt_events(run.pk, [STARTED, trial(1, 10.0)])
    run_record_prompt_events(run.pk, [trial(2, 30.0), CHOSEN])
    run.refresh_from_db()
    assert run.prompt_optimization["phase"] == "weights" and len(run.prompt_optimization["trials"]) == 2


def test_the_run_page_shows_the_section_only_for_a_run_that_optimizes_prompts(client, owner):
    client.force_login(owner)
    plain = make_run(owner, state=Run.State.RUNNING)
    assert 'id="prompt-phase"' not in client.get(reverse("runs:detail", args=[plain.pk])).content.decode()
    run = make_run(owner, state=Run.State.RUNNING)
    run.config = {**run.config, "prompt_optimizer": "gepa"}
    run.prompt_optimization = fold_prompt_events({}, [STARTED, trial(1, 12.5)])
    run.save()
    page = client.get(reverse("runs:detail", args=[run.pk]))
    assert 'id="prompt-phase"' in page.content.decode() and "js/prompt-phase.js" in page.content.decode()
    assert page.context["prompt_phase"]["trials"] == [{"trial": 1, "score": 12.5}]


def test_the_form_refuses_prompt_optimization_for_a_program_that_is_not_dspy(client, owner, toy_task):  # noqa: F811
    client.force_login(owner)
    response = client.post(reverse("runs:new"), launch_data(toy_task, prompt_optimizer="mipro_light"))
    assert response.status_code == 400
    assert "is not a DSPy program" in response.context["form"].errors["prompt_optimizer"][0]
    assert not Run.objects.exists()


def test_a_dspy_program_may_optimize_prompts_first(client, owner, test_plugins):
    catalog_sync()
    from webapp.runs.models import Program

    task = Task.objects.create(name="dspy-gen", title="DSPy", program=Program.objects.get(name="dspy_multihop"),
                               rewards=[{"name": "dspy_overlap", "weight": 1.0, "params": {}}])
    from webapp.runs.launch.forms import RunLaunchForm

    form = RunLaunchForm(data=launch_data(task, prompt_optimizer="mipro_light"), user=owner)
    assert form.is_valid(), form.errors
    assert form.cleaned_data["config"].prompt_optimizer == "mipro_light"
