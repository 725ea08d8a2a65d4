"""Run creation through the API and the adapter download (issue 26, item 1): a run created by a
script passes the launch form's checks (settings, limits, the model allow-list) with the errors by
field, is the token owner's, and a succeeded run's adapter downloads as a zip to its owner only."""

import io
import json
import zipfile

import pytest
from django.test import Client

from tests.webapp.runs.factories import make_run
from tests.webapp.runs.launch.test_launch import toy_task  # noqa: F401 (fixture)
from webapp.runs.models import Run
from webapp.runs.services import run_directory

pytestmark = pytest.mark.django_db

RUNS = "/api/runs/"


def post(client, body):
    return client.post(RUNS, body, content_type="application/json")


def test_a_token_queues_a_run_of_its_owner_with_the_pages_defaults_and_the_bodys_settings(
        api_client, owner, toy_task):  # noqa: F811
    response = post(api_client(owner), {"task": "toy", "name": "from a script", "tags": ["sweep", "api"],
                                        "config": {"steps": 3, "group_size": 2, "rollouts_per_example": 2,
                                                   "learning_rate": 2e-5, "gdpo_batch_norm": False}})
    assert response.status_code == 201, response.json()
    body = response.json()
    run = Run.objects.get(pk=body["id"])
    assert response["Location"].endswith(f"/api/runs/{run.pk}/")
    assert run.owner == owner and run.state == Run.State.QUEUED and run.name == "from a script"
    assert run.tags == ["sweep", "api"] and run.task.name == "toy" and body["program"] == "toy"
    assert run.config["steps"] == 3 and run.config["group_size"] == 2 and run.config["learning_rate"] == 2e-5
    assert run.config["gdpo_batch_norm"] is False  # a checkbox the page would leave unticked
    assert [r["name"] for r in run.config["rewards"]] == [r["name"] for r in toy_task.rewards]  # the task's


def test_a_dspy_program_state_in_the_body_becomes_the_runs_program_state(api_client, owner, toy_task,  # noqa: F811
                                                                         settings, tmp_path):
    settings.COHORT_RUNS_DIR = tmp_path / "runs"
    state = {"solve.predict": {"demos": [], "signature": {"instructions": "Add them."}},
             "metadata": {"dependency_versions": {"dspy": "3.4.1"}}}
    first = post(api_client(owner), {"task": "toy", "program_state": state, "config": {"steps": 2}})
    second = post(api_client(owner), {"task": "toy", "program_state": state, "config": {"steps": 2}})
    assert first.status_code == second.status_code == 201, first.json()
    path = first.json()["config"]["program_state"]
    assert path == second.json()["config"]["program_state"]  # one file per distinct state
    assert path.startswith(str(tmp_path / "runs" / "program-states")) and json.loads(open(path).read()) == state
    refused = post(api_client(owner), {"task": "toy", "program_state": ["not", "a", "state"]})
    assert refused.status_code == 400 and "program_state" in refused.json()["errors"]


def test_every_refusal_names_its_field_and_queues_nothing(api_client, owner, toy_task):  # noqa: F811
    client = api_client(owner)
    cases = [
        ({"task": "toy", "config": {"group_size": 0}}, "group_size"),
        ({"task": "toy", "config": {"group_size": "four"}}, "group_size"),
        ({"task": "toy", "config": {"bogus": 1}}, "bogus"),
        ({"task": "toy", "config": {"gdpo_batch_norm": "yes"}}, "gdpo_batch_norm"),
        ({"task": "no-such-task"}, "task"),
        ({}, "task"),
        ({"task": "toy", "tags": "not-a-list"}, "tags"),
        ({"task": "toy", "preset": "no-such-preset"}, "preset"),
        ({"task": "toy", "config": {"model": "/etc"}}, "model"),  # outside the allow-list
        ({"task": "toy", "program": [None, None]}, "program"),  # was a 500
    ]
    for body, field in cases:
        response = post(client, body)
        assert response.status_code == 400, (body, response.content)
        assert field in response.json()["errors"], (body, response.json())
        assert response.json()["detail"].startswith("The run was not created")
    for body in ([1, 2], {"task": "toy", "surprise": 1}, {"task": "toy", "config": [1]}, {"task": "t\x00y"},
                 {"task": "toy", "config": {"rewards": [{"name": "exact\x00match"}]}}):  # NUL: found by the fuzz
        response = post(client, body)
        assert response.status_code == 400 and "detail" in response.json(), body
    assert not Run.objects.exists()


def test_a_number_past_what_a_run_can_store_is_refused_beside_its_field_for_staff_too(api_client, staff,
                                                                                      toy_task):  # noqa: F811
    """Staff have no launch limits, so nothing else stops a huge `steps` (it was a 500: PostgreSQL's
    integer column overflowed)."""
    for steps in (2**31, 10**30):
        response = post(api_client(staff), {"task": "toy", "config": {"steps": steps}})
        assert response.status_code == 400 and "steps" in response.json()["errors"], response.content
    assert not Run.objects.exists()


def test_the_launch_limits_apply_as_on_the_page(api_client, owner, toy_task, settings):  # noqa: F811
    settings.COHORT_LIMIT_QUEUED_RUNS_PER_USER = 1
    make_run(owner)  # one queued already
    response = post(api_client(owner), {"task": "toy", "config": {"steps": 2}})
    assert response.status_code == 400
    assert response.json()["errors"]["__all__"] == ["You already have 1 queued runs; your limit is 1 queued runs at once."]
    assert Run.objects.count() == 1


def test_a_browser_session_needs_the_csrf_token_and_anonymous_gets_401(owner, toy_task):  # noqa: F811
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)
    assert post(browser, {"task": "toy"}).status_code == 403
    assert post(Client(), {"task": "toy"}).status_code == 401
    assert not Run.objects.exists()


@pytest.fixture
def trained_run(owner, settings, tmp_path):
    """A succeeded run of builtin:tiny whose folder holds the final adapter as the trainer writes it."""
    from trainer.config import RunConfig
    from trainer.models import adapter_readme, build_tiny_model
    from trainer.policy import PolicyUpdater, load_policy_model

    settings.COHORT_RUNS_DIR = tmp_path / "runs"
    run = make_run(owner, state=Run.State.SUCCEEDED, name="trained")
    run.config = {**run.config, "model": "builtin:tiny"}
    run.save(update_fields=["config"])
    model, tokenizer = load_policy_model(build_tiny_model(tmp_path / "models" / "tiny-toy"))
    PolicyUpdater(model, tokenizer).save_final_adapter(run_directory(run.pk) / "adapter", write=True,
                                                       base_model="builtin:tiny",
                                                       readme=adapter_readme(RunConfig(model="builtin:tiny")))
    return run


def test_a_succeeded_runs_adapter_downloads_as_a_zip_to_its_owner(api_client, owner, stranger, trained_run):
    response = api_client(owner).get(f"/api/runs/{trained_run.pk}/adapter/")
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    assert f'filename="run-{trained_run.pk}-adapter.zip"' in response["Content-Disposition"]
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert sorted(archive.namelist()) == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    server_copy = run_directory(trained_run.pk) / "adapter"
    assert archive.read("adapter_model.safetensors") == (server_copy / "adapter_model.safetensors").read_bytes()
    # loadable away from the server: the run's model id, not the worker's model cache folder
    assert json.loads(archive.read("adapter_config.json"))["base_model_name_or_path"] == trained_run.config["model"]
    assert "builtin:tiny" in archive.read("README.md").decode()
    assert api_client(stranger).get(f"/api/runs/{trained_run.pk}/adapter/").status_code == 404
    assert Client().get(f"/api/runs/{trained_run.pk}/adapter/").status_code == 401


def test_a_run_without_a_trained_adapter_is_a_404_that_says_why(api_client, owner, trained_run):
    running = make_run(owner, state=Run.State.RUNNING)
    response = api_client(owner).get(f"/api/runs/{running.pk}/adapter/")
    assert response.status_code == 404 and "has no trained adapter (running)" in response.json()["detail"]
