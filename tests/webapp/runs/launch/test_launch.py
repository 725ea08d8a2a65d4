"""The catalog sync, the launch form (validated by RunConfig), `launch_run`, cancel and resume."""

import re

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from tests.webapp.runs.factories import make_run
from trainer.programs import list_programs
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.launch.defaults import config_defaults
from webapp.runs.launch.forms import RunLaunchForm
from webapp.runs.models import Program, Run, Task

pytestmark = pytest.mark.django_db


@pytest.fixture
def toy_task():
    catalog_sync()
    return Task.objects.get(name="toy")


def launch_data(start_task, suggested_for=None, **changes) -> dict:
    """What a browser posts when the user keeps the form's defaults (those the program suggests for the
    model `suggested_for`, if given), with `changes` typed in."""
    form = RunLaunchForm(initial={**config_defaults(start_task, model=suggested_for), "task": start_task,
                                  "program": start_task.program.name})
    data = {}
    for name, field in form.fields.items():
        value = field.prepare_value(form[name].value())
        if value is not None and value is not False:
            data[name] = value
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def test_catalog_mirrors_the_registry_and_is_idempotent():
    Program.objects.create(name="retired", title="Retired", modules=["m"])
    first = catalog_sync()
    second = catalog_sync()
    registered = len(list_programs())  # the six built-ins and the installed plugins' programs
    assert first["programs"] == second["programs"] == registered >= 6
    assert first["deactivated"] == 1 and second["deactivated"] == 0
    search = Program.objects.get(name="search")
    assert search.modules == ["rewriter", "reranker", "answerer"] and search.is_active
    assert not Program.objects.get(name="retired").is_active
    toy = Task.objects.get(name="toy")
    assert toy.program.name == "toy" and toy.dataset is None
    assert [r["name"] for r in toy.rewards] == ["char_f1", "exact_match"]


def test_the_form_starts_from_the_task_and_a_preset_is_one_click_away(client, owner, toy_task):
    client.force_login(owner)
    page = client.get(reverse("runs:new")).content.decode()
    assert 'name="steps" value="40"' in page  # the toy program's suggested settings
    assert 'value="builtin:tiny"' in page
    assert f'href="?task={toy_task.pk}&amp;preset=mhgpo-rr"' in page
    preset = client.get(reverse("runs:new"), {"task": toy_task.pk, "preset": "mhgpo-rr"}).content.decode()
    assert 'value="0.7, 0.1, 0.2"' in preset and 'value="mhgpo" selected' in preset


def test_the_real_model_is_offered_with_the_settings_measured_for_it(client, owner, toy_task):
    from trainer.config import SMOLLM2_MODEL
    from webapp.limits.models import AllowedModel

    AllowedModel.objects.create(kind=AllowedModel.Kind.ID, value="Qwen/Qwen2.5-0.5B-Instruct")
    client.force_login(owner)
    page = client.get(reverse("runs:new"), {"task": toy_task.pk}).content.decode()
    choices = re.search(r'<datalist id="model-choices">(.*?)</datalist>', page, re.S).group(1)
    assert re.findall(r'<option value="([^"]+)"', choices) == ["builtin:tiny", SMOLLM2_MODEL, "Qwen/Qwen2.5-0.5B-Instruct"]
    assert 'list="model-choices"' in page
    toy_format = Task.objects.get(name="toy_format")
    page = client.get(reverse("runs:new"), {"task": toy_format.pk}).content.decode()
    assert f'href="?task={toy_format.pk}&amp;model=builtin%3Asmollm2-135m-instruct"' in page
    page = client.get(reverse("runs:new"), {"task": toy_format.pk, "model": SMOLLM2_MODEL}).content.decode()
    assert f'name="model" value="{SMOLLM2_MODEL}"' in page and 'name="max_new_tokens" value="24"' in page
    assert 'name="learning_rate" value="0.0002"' in page and 'name="temperature" value="1.0"' in page
    response = client.post(reverse("runs:new"), launch_data(toy_format, suggested_for=SMOLLM2_MODEL, steps=2))
    assert response.status_code == 302
    assert Run.objects.get().config["model"] == SMOLLM2_MODEL
    arith = Task.objects.get(name="arith_format")  # a task for the real model: it is the default there
    assert f'name="model" value="{SMOLLM2_MODEL}"' in client.get(reverse("runs:new"), {"task": arith.pk}).content.decode()
    response = client.get(reverse("runs:new"), {"task": toy_format.pk, "model": "gpt2"}, follow=True)
    assert "no suggested settings for model &#x27;gpt2&#x27;" in response.content.decode()


def test_the_engine_knobs_sit_in_a_folded_group_and_are_refused_beside_their_field(client, owner, toy_task):
    client.force_login(owner)
    page = client.get(reverse("runs:new"), {"task": toy_task.pk}).content.decode()
    group = re.search(r'<details class="card group">\s*<summary>Sampling engine \(vLLM, hf\) <a[^>]*>help</a></summary>(.*?)</details>',
                      page, re.S).group(1)
    for name in ("vllm_gpu_memory_utilization", "vllm_max_model_len", "vllm_enable_sleep_mode", "hf_generate_rows"):
        assert f'id="field-{name}"' in group
    response = client.post(reverse("runs:new"), launch_data(toy_task, vllm_enable_sleep_mode="on"))
    assert response.status_code == 400
    assert re.search(r'id="error-vllm_enable_sleep_mode"><li>sleep mode is a vLLM engine option',
                     response.content.decode())
    assert not Run.objects.exists()


def test_an_unknown_preset_goes_back_to_the_form_with_a_message(client, owner, toy_task):
    client.force_login(owner)
    response = client.get(reverse("runs:new"), {"task": toy_task.pk, "preset": "nope"}, follow=True)
    assert response.status_code == 200 and "unknown preset &#x27;nope&#x27;" in response.content.decode()


def test_a_valid_form_queues_the_run_it_shows(client, owner, toy_task):
    client.force_login(owner)
    response = client.post(reverse("runs:new"), launch_data(toy_task, steps=12, name="first try",
                                                            lora_targets="q_proj, v_proj"))
    run = Run.objects.get()
    assert response.status_code == 302 and response.url == reverse("runs:detail", args=[run.pk])
    assert (run.owner, run.task, run.name, run.state, run.total_steps) == (owner, toy_task, "first try", "queued", 12)
    assert run.config["lora_targets"] == ["q_proj", "v_proj"] and run.config["program"] == "toy"
    assert [r["name"] for r in run.config["rewards"]] == ["char_f1", "exact_match"]
    assert run.config["min_gpu_memory_gb"] is None  # left empty: any worker


def test_a_run_can_ask_for_a_gpu_memory_minimum(client, owner, toy_task):
    client.force_login(owner)
    assert client.post(reverse("runs:new"), launch_data(toy_task, min_gpu_memory_gb="40")).status_code == 302
    assert Run.objects.get().config["min_gpu_memory_gb"] == 40.0


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"group_size": 3}, "rollouts_per_example", "equal to group_size (3)"),
    ({"steps": "many"}, "steps", "Enter a whole number"),
    ({"learning_rate": "-1"}, "learning_rate", "learning_rate must be positive"),
    ({"rewards": "[{"}, "rewards", "Not valid JSON"),
    ({"rewards": '[{"name": "no_such_reward"}]'}, "rewards", "no_such_reward"),
    ({"rewards": '[{"name": "exact_match", "weight": "a"}]'}, "rewards", "weight must be a number, not 'a'"),
    ({"prompt_optimizer": "mipro_heavy"}, "prompt_optimizer", "Select a valid choice"),
    ({"fork_probabilities": "a, b"}, "fork_probabilities", "comma-separated float"),
    ({"strategy": "mhgpo", "sampling": "rr", "fork_probabilities": "0.5, 0.5"}, "fork_probabilities",
     "has 2 entries but program 'toy' has 1 agents"),
    ({"estimator": "gdpo", "rewards": '[{"name": "exact_match"}]'}, "estimator", "Add a second reward"),
    ({"teacher_rollouts": "teacher"}, "teacher_rollouts", "name=count"),
    ({"program": "math"}, "program", "generates its examples with program 'toy'"),
    ({"program": "nonexistent"}, "program", "Select a valid choice"),
    ({"min_gpu_memory_gb": "-8"}, "min_gpu_memory_gb", "must be a number of GB above 0"),
])
def test_an_invalid_form_is_a_400_with_the_error_beside_its_field(client, owner, toy_task, changes, field, message):
    client.force_login(owner)
    catalog_sync()
    response = client.post(reverse("runs:new"), launch_data(toy_task, **changes))
    assert response.status_code == 400
    assert message in response.context["form"].errors[field][0]
    assert f'id="error-{field}"' in response.content.decode()
    assert not Run.objects.exists()


def test_the_form_needs_a_csrf_token_and_a_login(csrf_client, client, owner, toy_task):
    assert client.post(reverse("runs:new"), launch_data(toy_task)).status_code == 302  # to the login page
    csrf_client.force_login(owner)
    assert csrf_client.post(reverse("runs:new"), launch_data(toy_task)).status_code == 403
    assert not Run.objects.exists()


def test_cancel_and_resume_follow_the_state_machine(client, owner, stranger):
    queued = make_run(owner)
    client.force_login(owner)
    assert client.post(reverse("runs:cancel", args=[queued.pk])).status_code == 302
    queued.refresh_from_db()
    assert queued.state == Run.State.CANCELLED
    again = client.post(reverse("runs:cancel", args=[queued.pk]))
    assert again.status_code == 409 and "cannot be cancelled" in again.content.decode()
    interrupted = make_run(owner, state=Run.State.INTERRUPTED)
    assert client.post(reverse("runs:resume", args=[interrupted.pk])).status_code == 302
    interrupted.refresh_from_db()
    assert (interrupted.state, interrupted.attempt) == (Run.State.QUEUED, 2)
    assert client.get(reverse("runs:cancel", args=[interrupted.pk])).status_code == 405
    client.force_login(stranger)
    assert client.post(reverse("runs:cancel", args=[interrupted.pk])).status_code == 404
    interrupted.refresh_from_db()
    assert interrupted.state == Run.State.QUEUED


def test_runs_list_filters_and_refuses_unknown_values(client, owner, stranger, toy_task):
    make_run(owner, name="alpha")
    make_run(owner, name="beta", state=Run.State.SUCCEEDED)
    make_run(stranger, name="gamma", state=Run.State.SUCCEEDED)
    client.force_login(owner)

    def names(**params):
        response = client.get(reverse("runs:list"), params)
        assert response.status_code == 200
        return sorted(r.name for r in response.context["runs"])

    assert names() == ["alpha", "beta"]
    assert names(state="succeeded") == ["beta"]
    assert names(q="alp") == ["alpha"]
    assert names(owner=stranger.username) == []  # a filter never widens what a user may see
    assert client.get(reverse("runs:list"), {"state": "exploded"}).status_code == 400
    assert client.get(reverse("runs:list"), {"task": "no-such-task"}).status_code == 400


def test_runs_slash_is_the_runs_list_too(client, owner):
    make_run(owner, name="alpha")
    client.force_login(owner)
    response = client.get("/runs/", {"q": "alp"})
    assert response.status_code == 200 and [r.name for r in response.context["runs"]] == ["alpha"]


def test_the_launch_form_folds_the_advanced_groups_and_opens_one_holding_an_error(client, owner, toy_task):
    client.force_login(owner)

    def groups(html: str) -> dict[str, bool]:
        return {title: bool(is_open) for is_open, title in
                re.findall(r'<details class="card group"( open)?>\s*<summary>([^<]+) <a class="group-help"', html)}

    shown = groups(client.get(reverse("runs:new")).content.decode())
    assert shown == {"Task and rewards": True, "Optimize prompts first (DSPy programs)": False, "Strategy": True, "Advantage estimator": True, "Batch shape": True,
                     "Optimization": False, "LoRA adapter": False, "Sampling": False, "Model and backend": True,
                     "Sampling engine (vLLM, hf)": False, "Evaluation, checkpoints, seed": False}
    refused = client.post(reverse("runs:new"), launch_data(toy_task, lora_r="0"))
    assert refused.status_code == 400 and Run.objects.count() == 0
    after = groups(refused.content.decode())
    assert after["LoRA adapter"] is True and after["Optimization"] is False


def test_the_first_launch_message_is_marked_to_go_away_once_the_run_moves_on(client, owner, toy_task):
    client.force_login(owner)
    page = client.post(reverse("runs:new"), launch_data(toy_task), follow=True).content.decode()
    assert re.search(r'<li class="run-queued success">Run \d+ is queued\.</li>', page)


def test_launch_run_command_queues_a_validated_run(owner, toy_task, tmp_path):
    overrides = tmp_path / "overrides.toml"
    overrides.write_text("steps = 7\nlearning_rate = 0.001\n")
    call_command("launch_run", "--task", "toy", "--owner", owner.username, "--config", str(overrides),
                 "--set", "seed=3", "--name", "scripted")
    run = Run.objects.get()
    assert (run.name, run.total_steps, run.config["seed"], run.config["learning_rate"]) == ("scripted", 7, 3, 0.001)


def test_launch_run_command_starts_from_the_settings_suggested_for_a_model(owner, toy_task):
    call_command("launch_run", "--task", "toy_format", "--owner", owner.username,
                 "--model", "builtin:smollm2-135m-instruct", "--set", "steps=3")
    config = Run.objects.get().config
    assert (config["model"], config["max_new_tokens"], config["learning_rate"], config["steps"]) == (
        "builtin:smollm2-135m-instruct", 24, 2e-4, 3)


@pytest.mark.parametrize(("args", "message"), [
    (["--task", "nope"], "No task named 'nope'"),
    (["--task", "toy", "--model", "gpt2"], "no suggested settings for model 'gpt2'"),
    (["--task", "toy", "--set", "group_size=1"], "group_size must be at least 2"),
    (["--task", "toy", "--set", "oops"], "--set takes key=value"),
    (["--task", "toy", "--preset", "nope"], "unknown preset 'nope'"),
])
def test_launch_run_command_explains_bad_input(owner, toy_task, args, message):
    with pytest.raises(CommandError, match=message):
        call_command("launch_run", "--owner", owner.username, *args)
    assert not Run.objects.exists()


def test_a_task_without_imported_rows_cannot_be_launched(client, owner, toy_task):
    from webapp.datasets.models import Dataset

    empty = Dataset.objects.create(name="not-yet", kind="math")
    task = Task.objects.create(name="math-empty", title="Math", program=Program.objects.get(name="math"), dataset=empty,
                               rewards=[{"name": "numeric_match"}])
    client.force_login(owner)
    data = launch_data(toy_task, task=task.pk, program="math", rewards='[{"name": "numeric_match"}]')
    response = client.post(reverse("runs:new"), data)
    assert response.status_code == 400
    assert "has no training rows yet" in response.context["form"].errors["task"][0]
    assert not Run.objects.exists()
