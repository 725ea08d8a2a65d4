"""The model allow-list: hub ids (exact or prefix), local folders inside allowed roots after symlinks,
and the paths no one may train from (`..`, run directories, the server's own files); refused in the
form beside `model`, in `launch_run` and at claim time."""

import os

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.urls import reverse

from tests.webapp.limits.test_limits import toy_config
from tests.webapp.runs.launch.test_launch import launch_data, toy_task  # noqa: F401 (fixture)
from webapp.limits.model_allowlist import model_refusal, trainer_environment
from webapp.limits.models import AllowedModel
from webapp.runs.launch.check import Launch
from webapp.runs.models import Run
from webapp.runs.services import run_claim, run_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(make_user):
    return make_user("boss", staff=True)


@pytest.fixture
def models_root(tmp_path, settings):
    """An allowed local root holding one model folder, with the runs folder beside it (not inside)."""
    settings.COHORT_RUNS_DIR = tmp_path / "runs"
    root = tmp_path / "models"
    (root / "llama-tiny").mkdir(parents=True)
    AllowedModel.objects.create(kind=AllowedModel.Kind.LOCAL_ROOT, value=str(root))
    return root


def test_the_built_in_models_are_always_allowed_and_nothing_else_on_an_empty_list(owner):
    assert model_refusal(owner, "builtin:tiny") is None
    assert model_refusal(owner, "builtin:smollm2-135m-instruct") is None
    assert model_refusal(owner, "Qwen/Qwen2.5-0.5B-Instruct") == (
        "Model 'Qwen/Qwen2.5-0.5B-Instruct' is not on this server's allow-list (allowed: only the built-in "
        "models, builtin:tiny, builtin:smollm2-135m-instruct). Ask an admin to add it.")


def test_hub_ids_exact_or_by_prefix(owner, settings):
    AllowedModel.objects.create(kind=AllowedModel.Kind.PREFIX, value="Qwen/")
    AllowedModel.objects.create(kind=AllowedModel.Kind.ID, value="meta-llama/Llama-3.2-1B-Instruct")
    assert model_refusal(owner, "Qwen/Qwen2.5-7B-Instruct") is None
    assert model_refusal(owner, "meta-llama/Llama-3.2-1B-Instruct") is None
    refused = model_refusal(owner, "meta-llama/Llama-3.1-70B")
    assert "not on this server's allow-list (allowed: Qwen/…, meta-llama/Llama-3.2-1B-Instruct)" in refused
    settings.COHORT_MODEL_ALLOWED_PREFIXES = ["meta-llama/"]
    assert model_refusal(owner, "meta-llama/Llama-3.1-70B") is None


def test_a_local_folder_inside_an_allowed_root_is_allowed_and_outside_is_refused(owner, models_root, tmp_path):
    assert model_refusal(owner, str(models_root / "llama-tiny")) is None
    (tmp_path / "elsewhere").mkdir()
    refused = model_refusal(owner, str(tmp_path / "elsewhere"))
    assert refused.startswith(f"Local model folder {tmp_path / 'elsewhere'} is outside the allowed folders ({models_root})")


def test_dot_dot_is_refused_even_when_it_resolves_inside_a_root(owner, models_root):
    sneaky = f"{models_root}/llama-tiny/../llama-tiny"
    assert model_refusal(owner, sneaky) == "Model paths may not contain '..'; write the folder's full path."
    assert model_refusal(owner, "../../etc") == "Model paths may not contain '..'; write the folder's full path."


def test_a_symlink_inside_a_root_that_points_outside_is_refused(owner, models_root, tmp_path):
    outside = tmp_path / "secret-weights"
    outside.mkdir()
    os.symlink(outside, models_root / "innocent")
    refused = model_refusal(owner, str(models_root / "innocent"))
    assert "is outside the allowed folders" in refused and f"(really {outside})" in refused


def test_run_directories_are_refused_even_inside_a_root_and_for_staff(owner, staff, tmp_path, settings):
    settings.COHORT_RUNS_DIR = tmp_path / "runs"
    other_users_run = tmp_path / "runs" / "run-17" / "checkpoints" / "step-10"
    other_users_run.mkdir(parents=True)
    AllowedModel.objects.create(kind=AllowedModel.Kind.LOCAL_ROOT, value=str(tmp_path))  # a careless root
    for user in (owner, staff):
        assert model_refusal(user, str(other_users_run)) == (
            f"Run directories are not models: {other_users_run} is inside the runs folder.")


def test_the_servers_own_files_are_refused_even_under_a_root(owner, staff, settings):
    AllowedModel.objects.create(kind=AllowedModel.Kind.LOCAL_ROOT, value=str(settings.BASE_DIR.parent))
    venv = settings.BASE_DIR / ".venv"
    for user in (owner, staff):
        refused = model_refusal(user, str(venv))
        assert refused.startswith(f"{venv}") and "the Cohort code and its virtual environment" in refused
    assert "the var dir" in model_refusal(owner, str(settings.VAR_DIR))


def test_a_control_character_is_refused_not_a_crash(owner, staff):
    # A NUL would make realpath raise; a config file (launch_run --config) can carry one.
    for user in (owner, staff):
        assert model_refusal(user, "/srv/models/a\x00b") == "A model name cannot contain control characters."


def test_staff_may_train_any_hub_id_but_not_dot_dot(staff):
    assert model_refusal(staff, "some-lab/private-model") is None
    assert model_refusal(staff, "/srv/../etc") == "Model paths may not contain '..'; write the folder's full path."


def test_the_form_shows_the_refusal_beside_the_model_field(client, owner, toy_task):  # noqa: F811
    client.force_login(owner)
    response = client.post(reverse("runs:new"), launch_data(toy_task, model="Qwen/Qwen2.5-0.5B-Instruct"))
    assert response.status_code == 400
    assert "is not on this server's allow-list" in response.context["form"].errors["model"][0]
    assert 'id="error-model"' in response.content.decode()
    assert not Run.objects.exists()


def test_launch_run_refuses_a_model_outside_the_list(owner, toy_task):  # noqa: F811
    with pytest.raises(CommandError, match="is not on this server's allow-list"):
        call_command("launch_run", "--task", toy_task.name, "--owner", owner.username,
                     "--set", "model=Qwen/Qwen2.5-0.5B-Instruct")
    assert not Run.objects.exists()


def test_claim_fails_a_run_whose_model_left_the_list(owner, toy_task):  # noqa: F811
    entry = AllowedModel.objects.create(kind=AllowedModel.Kind.PREFIX, value="Qwen/")
    run = run_create(Launch(owner=owner, task=toy_task, config=toy_config(model="Qwen/Qwen2.5-0.5B-Instruct")))
    entry.delete()  # the admin removed it while the run waited
    assert run_claim(run.pk, worker="gpu0@h") is None
    run.refresh_from_db()
    assert run.state == Run.State.FAILED and "'Qwen/Qwen2.5-0.5B-Instruct' is not on this server's allow-list" in run.error


def test_an_admin_entry_is_checked(models_root):
    with pytest.raises(ValidationError, match="must be an absolute folder"):
        AllowedModel(kind=AllowedModel.Kind.LOCAL_ROOT, value="models").full_clean()
    with pytest.raises(ValidationError, match="looks like a folder"):
        AllowedModel(kind=AllowedModel.Kind.PREFIX, value="/srv/models").full_clean()
    AllowedModel(kind=AllowedModel.Kind.PREFIX, value="mistralai/").full_clean()


def test_training_downloads_go_to_the_one_shared_cache(settings, tmp_path):
    settings.COHORT_MODEL_CACHE = tmp_path / "cache"
    assert trainer_environment() == {"HF_HOME": str(tmp_path / "cache"), "HF_HUB_CACHE": str(tmp_path / "cache" / "hub")}
