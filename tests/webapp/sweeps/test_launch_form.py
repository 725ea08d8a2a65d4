"""The launch form's Sweep button (webapp/sweeps/launch_views.py, forms.py): the form's settings are the
base, each `sweep__<field>` entry a dimension of the space, the settings fieldset the rest; a refused
sweep shows each reason beside its input and leaves nothing behind."""

import re

import pytest
from django.urls import reverse

from tests.webapp.runs.launch.test_launch import launch_data
from webapp.limits.models import LimitOverride
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.models import Run, Task
from webapp.sweeps.models import Sweep, Trial, TrialRun

pytestmark = pytest.mark.django_db

SETTINGS = {"sweep_method": "tpe", "sweep_seeds": "2", "sweep_n_trials": "6", "sweep_parallel": "2",
            "sweep_objective": "", "sweep_mode": "last", "sweep_direction": "maximize", "sweep_pruner": "median",
            "sweep_sampler_seed": "7", "sweep_startup_trials": "2", "sweep_warmup_steps": ""}


@pytest.fixture
def toy_task():
    catalog_sync()
    return Task.objects.get(name="toy")


def sweep_post(client, task, *, settings=None, base=None, **entries):
    """The Sweep button pressed on the toy task's form, its defaults kept but for `base`, the sweep's
    `settings` and `entries` (sweep_entry_<field>) typed in."""
    data = {**launch_data(task, name="lr search", **(base or {})), **SETTINGS, **(settings or {}), "sweep": "1"}
    data.update({key.replace("sweep_entry_", "sweep__"): value for key, value in entries.items()})
    return client.post(reverse("runs:new"), data)


def error_beside(page: str, field: str) -> str:
    """The text of the error list rendered beside `field` (its wrapper's `error-<field>` list)."""
    found = re.search(rf'id="error-{field}">(.*?)</ul>', page, re.S)
    assert found, f"no error beside {field}"
    return re.sub(r"<[^>]+>", " ", found.group(1))


def nothing_created():
    return not Sweep.objects.exists() and not Trial.objects.exists() and not Run.objects.exists()


def test_the_form_offers_a_sweep_toggle_beside_each_sweepable_field_and_the_settings(client, owner, toy_task):
    client.force_login(owner)
    page = client.get(reverse("runs:new"), {"task": toy_task.pk}).content.decode()
    assert 'id="launch-sweep"' in page and 'name="sweep"' in page
    for name in ("learning_rate", "group_size", "estimator", "model", "gdpo_batch_norm"):
        assert f'name="sweep__{name}"' in page and f'id="sweep-toggle-{name}"' in page
    for name in ("rewards", "seed", "lora_targets", "fork_probabilities", "task", "name"):
        assert f'name="sweep__{name}"' not in page  # a list, the seed (its own setting), not a RunConfig field
    assert 'placeholder="e.g. 1e-5..1e-3 log, or 0.1, 0.2"' in page
    settings = re.search(r'<details class="card sweep-settings" id="sweep-settings">(.*?)</details>', page, re.S)
    assert settings, "the settings start folded"
    for name in SETTINGS:
        assert f'name="{name}"' in settings.group(1)


def test_a_sweep_from_the_form_queues_its_first_trials_and_opens_its_page(client, owner, toy_task):
    client.force_login(owner)
    response = sweep_post(client, toy_task, sweep_entry_learning_rate="1e-5..1e-3 log", sweep_entry_steps="")
    sweep = Sweep.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/sweeps/{sweep.pk}/"
    assert (sweep.owner, sweep.task, sweep.name, sweep.method, sweep.seeds, sweep.n_trials, sweep.parallel) == (
        owner, toy_task, "lr search", "tpe", 2, 6, 2)
    assert sweep.space == {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}}  # the empty entry is ignored
    assert (sweep.pruner, sweep.sampler_seed, sweep.options, sweep.mode) == ("median", 7, {"startup_trials": 2}, "last")
    evaluates = sweep.config["eval_every"] or sweep.config["eval_before"]
    assert sweep.objective == ("eval/reward/mean" if evaluates else "reward/mean")  # left blank: the default
    assert sweep.trials.count() == 2  # two configurations at once
    runs = Run.objects.filter(sweep_member__trial__sweep=sweep)
    assert runs.count() == 4 and {r.state for r in runs} == {Run.State.QUEUED}
    assert TrialRun.objects.count() == 4
    for run in runs:
        assert 1e-5 <= run.config["learning_rate"] <= 1e-3 and run.config["seed"] in (0, 1)
    page = client.get(response["Location"])
    assert page.status_code == 200 and f"Sweep {sweep.pk} is running: 2 configurations of 6 queued" in page.content.decode()


def test_a_grid_of_values_from_the_form(client, owner, toy_task):
    client.force_login(owner)
    response = sweep_post(client, toy_task, settings={"sweep_method": "grid", "sweep_n_trials": "", "sweep_seeds": "1",
                                                      "sweep_pruner": "none", "sweep_startup_trials": ""},
                          sweep_entry_estimator="grpo, gdpo", sweep_entry_gdpo_batch_norm="true, false")
    assert response.status_code == 302
    sweep = Sweep.objects.get()
    assert sweep.n_trials == 4 and sweep.space == {"estimator": {"values": ["grpo", "gdpo"]},
                                                   "gdpo_batch_norm": {"values": [True, False]}}


@pytest.mark.parametrize(("entries", "settings", "field", "message"), [
    ({"learning_rate": "1e-3..1e-5 log"}, {}, "learning_rate", "must be below its high"),
    ({"learning_rate": "1e-5..abc"}, {}, "learning_rate", "is not a number"),
    ({"model": "a..b"}, {}, "model", "model is not numeric"),
    ({"group_size": "4, x"}, {}, "group_size", "is not an integer"),
    ({"learning_rate": "0.1,,0.2"}, {}, "learning_rate", "value 2 of 3 is empty (as in"),
    ({"group_size": "4, 8,"}, {}, "group_size", "value 3 of 3 is empty"),
    ({"estimator": "grpo, nope"}, {}, "estimator", "is not one of"),
    ({"learning_rate": "-1, 1e-4"}, {}, "learning_rate", "learning_rate must be positive"),
    ({"learning_rate": "1e-5..1e-3"}, {"sweep_seeds": "11"}, "sweep_seeds", "from 1 to 10"),
    ({"learning_rate": "1e-5..1e-3"}, {"sweep_seeds": "two"}, "sweep_seeds", "Enter a whole number"),
    ({"learning_rate": "1e-5..1e-3"}, {"sweep_n_trials": "0"}, "sweep_n_trials", "from 1 to 1000"),
    ({"learning_rate": "1e-5..1e-3"}, {"sweep_parallel": "99"}, "sweep_parallel", "from 1 to 32"),
    ({"learning_rate": "1e-5..1e-3"}, {"sweep_method": "bayes"}, "sweep_method", "Select a valid choice"),
    ({"learning_rate": "1e-5..1e-3"}, {"sweep_objective": "x" * 201}, "sweep_objective", "at most 200"),
    ({"learning_rate": "1e-5..1e-3"}, {"sweep_startup_trials": "-1"}, "sweep_options", "whole numbers from 0 to"),
    ({"learning_rate": "1e-5..1e-3"}, {"sweep_warmup_steps": "1.5"}, "sweep_warmup_steps", "Enter a whole number"),
])
def test_bad_input_is_refused_beside_its_field_and_creates_nothing(client, owner, toy_task, entries, settings, field,
                                                                    message):
    client.force_login(owner)
    response = sweep_post(client, toy_task, settings=settings,
                          **{f"sweep_entry_{name}": text for name, text in entries.items()})
    assert response.status_code == 400
    page = response.content.decode()
    assert message in error_beside(page, field)
    assert nothing_created()
    for name, text in entries.items():  # what was typed is shown again, its entry on
        assert f'name="sweep__{name}" id="id_sweep__{name}" value="{text}"' in page
    assert '<details class="card sweep-settings" id="sweep-settings" open>' in page


def test_an_unknown_entry_is_refused_by_name_at_the_top(client, owner, toy_task):
    client.force_login(owner)
    response = sweep_post(client, toy_task, sweep_entry_learning_rate="1e-5..1e-3", sweep_entry_no_such="1, 2")
    assert response.status_code == 400
    assert "no_such: RunConfig has no setting &#x27;no_such&#x27;" in response.content.decode()
    assert nothing_created()


def test_nothing_swept_is_refused_with_the_reason(client, owner, toy_task):
    client.force_login(owner)
    response = sweep_post(client, toy_task, sweep_entry_learning_rate="  ")
    assert response.status_code == 400
    assert "Choose at least one setting to sweep" in response.content.decode()
    assert nothing_created()


def test_a_grid_over_the_limits_is_refused(client, owner, toy_task):
    client.force_login(owner)
    grid = {"sweep_method": "grid", "sweep_n_trials": "", "sweep_seeds": "1", "sweep_pruner": "none",
            "sweep_startup_trials": ""}
    many = ", ".join(str(n) for n in range(1, 41))
    response = sweep_post(client, toy_task, settings=grid, sweep_entry_steps=many, sweep_entry_max_new_tokens=many)
    assert response.status_code == 400
    assert "The grid has 1,600 configurations; a sweep tries at most 1000." in response.content.decode()
    LimitOverride.objects.create(user=owner, active_runs=3, queued_runs=3)
    response = sweep_post(client, toy_task, settings={**grid, "sweep_parallel": "4"},
                          base={"strategy": "mmgrpo", "rollouts_per_example": 8},
                          sweep_entry_group_size="4, 8", sweep_entry_lora_r="4, 8")
    assert response.status_code == 400
    assert "4 runs at once" in error_beside(response.content.decode(), "sweep_parallel")
    assert nothing_created()


def test_a_plain_launch_ignores_the_sweep_inputs(client, owner, toy_task):
    client.force_login(owner)
    data = {**launch_data(toy_task), **SETTINGS, "sweep__learning_rate": "1e-5..1e-3 log"}
    response = client.post(reverse("runs:new"), data)
    assert response.status_code == 302 and Run.objects.count() == 1 and not Sweep.objects.exists()


def test_a_bad_base_form_is_shown_again_with_the_sweep_entries_kept(client, owner, toy_task):
    client.force_login(owner)
    data = {**launch_data(toy_task, steps="many"), **SETTINGS, "sweep": "1", "sweep__learning_rate": "1e-5..1e-3 log"}
    response = client.post(reverse("runs:new"), data)
    assert response.status_code == 400
    page = response.content.decode()
    assert "Enter a whole number" in error_beside(page, "steps")
    assert 'value="1e-5..1e-3 log"' in page and nothing_created()


def test_a_stranger_anonymous_and_csrf(client, csrf_client, owner, toy_task):
    data = {**launch_data(toy_task), **SETTINGS, "sweep": "1", "sweep__learning_rate": "1e-5..1e-3"}
    response = client.post(reverse("runs:new"), data)  # anonymous: the login page
    assert response.status_code == 302 and "/login/" in response["Location"]
    csrf_client.force_login(owner)
    assert csrf_client.post(reverse("runs:new"), data).status_code == 403
    assert nothing_created()


ODD_ENTRIES = ["..", "1..", "..1", "1..2..3", "1e-5..1e-3 log log", "1e999..1e1000", "-1e999, 1", "nan, 1",
               "inf..1", "99999999999999999999, 1", "1..99999999999999999999", "a\x00b, c", "é, ü", ",,,", "true..false",
               "0..1 log", " 1 .. 2 ", "1,2" * 200]


@pytest.mark.parametrize("text", ODD_ENTRIES)
@pytest.mark.parametrize("field", ["learning_rate", "group_size", "model", "gdpo_batch_norm", "rewards", "no\x00such"])
def test_no_entry_is_a_server_error(client, owner, toy_task, field, text):
    client.force_login(owner)
    response = sweep_post(client, toy_task, **{f"sweep_entry_{field}": text})
    assert response.status_code in (302, 400), response.status_code
    if response.status_code == 400:
        assert Sweep.objects.count() == 0
