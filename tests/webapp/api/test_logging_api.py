"""The logging API (webapp/api/logging_views.py): a trainer outside Cohort creates a run, streams its
steps and finishes it; every bound answers 400 (or 413) naming the field; only the owner logs; the
run reads back through the read API and the pages like any run."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.test import Client

from tests.webapp.runs.factories import make_run, make_task
from tests.webapp.runs.live.test_consumers import ORIGIN, connect, session_cookie
from webapp.runs.models import Rollout, Run, StepMetric

pytestmark = pytest.mark.django_db

CREATE = "/api/external/runs/"


def post(client: Client, url: str, body, **extra):
    return client.post(url, json.dumps(body) if not isinstance(body, str | bytes) else body,
                       content_type="application/json", **extra)


def group_rollouts(prompt="Say a word.", completions=("cat", "cat dog", "bird"), rewards=(1.0, 0.0, 0.5)):
    return [{"prompt": prompt, "completion": c, "rewards": {"correct": r}, "advantage": r - 0.5, "group": 0}
            for c, r in zip(completions, rewards, strict=True)]


@pytest.fixture
def trl_run(api_client, owner):
    """A run created through the API as TRL would: its id and the owner's client."""
    make_task("toy_format")
    client = api_client(owner)
    response = post(client, CREATE, {"client_id": "trl-1", "task": "toy_format", "origin": "trl", "total_steps": 5,
                                     "config": {"num_generations": 3}, "tags": ["TRL", "grpo"]})
    assert response.status_code == 201, response.content
    return response.json()["id"], client


# --- create -------------------------------------------------------------------------------------


def test_create_answers_201_then_200_for_the_same_client_id(api_client, owner):
    client = api_client(owner)
    body = {"client_id": "run.2024-07_01", "task": "my-task", "name": "first", "notes": "from TRL",
            "config": {"learning_rate": 1e-6, "nested": {"a": [1, 2]}}, "origin": "trl"}
    created = post(client, CREATE, body)
    assert created.status_code == 201
    run = created.json()
    assert created["Location"].endswith(f"/api/runs/{run['id']}/")
    assert run["url"] == f"http://testserver/runs/{run['id']}/" and run["origin"] == "trl"
    assert run["state"] == "running" and run["task"] == "my-task" and run["program"] == "external"
    assert run["config"] == body["config"] and run["summary"]["started_at"] and run["owner"] == "owner"
    again = post(client, CREATE, {**body, "name": "second"})
    assert again.status_code == 200 and again.json()["id"] == run["id"] and again.json()["name"] == "first"
    assert Run.objects.filter(owner=owner).count() == 1
    assert api_client(owner).get(f"/api/runs/{run['id']}/").json()["origin"] == "trl"


def test_create_defaults_and_tags_like_the_runs_api(trl_run):
    run_id, client = trl_run
    run = Run.objects.get(pk=run_id)
    assert run.tags == ["trl", "grpo"] and run.total_steps == 5 and run.external_id == "trl-1"
    response = post(client, CREATE, {"client_id": "bare", "task": "toy_format"})
    assert response.json()["origin"] == "sdk" and response.json()["summary"]["total_steps"] == 0


def test_a_cohort_run_says_so_in_the_api(api_client, owner):
    run = make_run(owner)
    assert api_client(owner).get(f"/api/runs/{run.pk}/").json()["origin"] == "cohort"


@pytest.mark.parametrize("body, message", [
    ([], "must be a JSON object"),
    ({"task": "t"}, "'client_id' is required"),
    ({"client_id": "a b", "task": "t"}, "'client_id' must be 1 to 64 letters"),
    ({"client_id": "x" * 65, "task": "t"}, "'client_id' has at most 64 characters"),
    ({"client_id": 7, "task": "t"}, "'client_id' must be a string, not an integer"),
    ({"client_id": "a"}, "'task' is required"),
    ({"client_id": "a", "task": "no spaces"}, "'task' must be a task name"),
    ({"client_id": "a", "task": "t" * 101}, "'task' has at most 100 characters"),
    ({"client_id": "a", "task": "t", "name": "n" * 201}, "'name' has at most 200 characters"),
    ({"client_id": "a", "task": "t", "name": "a\x00b"}, "'name' holds a NUL"),
    ({"client_id": "a", "task": "t", "config": [1]}, "'config' must be an object"),
    ({"client_id": "a", "task": "t", "config": {"k": "v" * 70_000}}, "'config' is 70,008 bytes of JSON; at most 65,536"),
    ({"client_id": "a", "task": "t", "tags": "x"}, "'tags' must be a list of strings"),
    ({"client_id": "a", "task": "t", "tags": ["ok", "!bad"]}, "'tags': tags are letters, digits"),
    ({"client_id": "a", "task": "t", "tags": ["two words"]}, "'tags': tags are letters, digits"),
    ({"client_id": "a", "task": "t", "tags": [""]}, "'tags': tags are letters, digits"),
    ({"client_id": "a", "task": "t", "tags": ["t" * 41]}, "'tags': a tag has at most 40 characters"),
    ({"client_id": "a", "task": "t", "tags": ["same"] * 21}, "'tags' holds 21 tags; at most 20"),
    ({"client_id": "a", "task": "t", "origin": "cohort"}, "'origin' names the trainer"),
    ({"client_id": "a", "task": "t", "origin": "o" * 41}, "'origin' has at most 40 characters"),
    ({"client_id": "a", "task": "t", "total_steps": 10_000_001}, "'total_steps' must be between 0 and 10,000,000"),
    ({"client_id": "a", "task": "t", "total_steps": "5"}, "'total_steps' must be an integer, not a string"),
])
def test_create_bounds(api_client, owner, body, message):
    response = post(api_client(owner), CREATE, body)
    assert response.status_code == 400 and message in response.json()["detail"], response.content
    assert not Run.objects.exists()


def test_a_nul_in_the_config_is_stored_as_the_replacement_character(api_client, owner):
    response = post(api_client(owner), CREATE, {"client_id": "a", "task": "t", "config": {"k\x00": ["a\x00b"]}})
    assert response.status_code == 201
    assert Run.objects.get().config == {"k\ufffd": ["a\ufffdb"]}


def test_a_step_number_twice_in_one_post_stores_the_first(api_client, owner):
    client = api_client(owner)
    run_id = post(client, CREATE, {"client_id": "a", "task": "t"}).json()["id"]
    body = {"steps": [{"step": 3, "metrics": {"loss": 1.0}}, {"step": 3, "metrics": {"loss": 9.0}}]}
    response = post(client, f"/api/runs/{run_id}/steps/", body)
    assert response.status_code == 200 and response.json()["stored"] == [3]
    assert StepMetric.objects.get(run_id=run_id).metrics["loss"] == 1.0


def test_create_refuses_deep_or_infinite_config(api_client, owner):
    deep = {}
    for _ in range(40):
        deep = {"a": deep}
    client = api_client(owner)
    response = post(client, CREATE, {"client_id": "a", "task": "t", "config": deep})
    assert response.status_code == 400 and "nests deeper than 32 levels" in response.json()["detail"]
    huge = post(client, CREATE, '{"client_id": "a", "task": "t", "config": {"x": 1e999}}')
    assert huge.status_code == 400 and "too large to store" in huge.json()["detail"]
    nan = post(client, CREATE, '{"client_id": "a", "task": "t", "config": {"x": NaN}}')
    assert nan.status_code == 400 and "JSON parse error" in nan.json()["detail"]
    nested = post(client, CREATE, "[" * 100_000 + "]" * 100_000)
    assert nested.status_code == 400 and "JSON parse error" in nested.json()["detail"]


def test_create_at_the_active_run_limit_is_a_400_with_the_limit(api_client, owner, settings):
    settings.COHORT_LIMIT_ACTIVE_RUNS_PER_USER = 1
    client = api_client(owner)
    assert post(client, CREATE, {"client_id": "a", "task": "t"}).status_code == 201
    refused = post(client, CREATE, {"client_id": "b", "task": "t"})
    assert refused.status_code == 400 and "your limit is 1" in refused.json()["detail"]
    assert post(client, CREATE, {"client_id": "a", "task": "t"}).status_code == 200


def test_a_body_over_the_apis_limit_is_a_json_413(api_client, owner, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = post(api_client(owner), CREATE, {"client_id": "a", "task": "t", "notes": "n" * 2000})
    assert response.status_code == 413 and "DATA_UPLOAD_MAX_MEMORY_SIZE" in response.json()["detail"]
    assert not Run.objects.exists()


def test_the_launch_api_refuses_a_task_of_runs_trained_elsewhere(trl_run, api_client, owner):
    post(trl_run[1], CREATE, {"client_id": "x", "task": "elsewhere-only"})
    response = post(api_client(owner), "/api/runs/", {"task": "elsewhere-only"})
    assert response.status_code == 400 and "holds only runs trained elsewhere" in response.json()["errors"]["task"][0]


# --- steps --------------------------------------------------------------------------------------


def test_steps_are_stored_once_and_read_back_through_the_read_api(trl_run):
    run_id, client = trl_run
    body = {"steps": [{"step": 1, "metrics": {"loss": 0.25, "kl": None}, "rollouts": group_rollouts()},
                      {"step": 2, "metrics": {"loss": 0.2}}]}
    first = post(client, f"/api/runs/{run_id}/steps/", body)
    assert first.status_code == 200 and first.json() == {"run": run_id, "stored": [1, 2], "skipped": []}
    retried = post(client, f"/api/runs/{run_id}/steps/", body)
    assert retried.json() == {"run": run_id, "stored": [], "skipped": [1, 2]}
    assert StepMetric.objects.filter(run_id=run_id).count() == 2 and Rollout.objects.filter(run_id=run_id).count() == 3
    groups = client.get(f"/api/runs/{run_id}/steps/1/groups/").json()["results"]
    assert len(groups) == 1 and groups[0]["module"] == "completion" and groups[0]["size"] == 3
    assert groups[0]["reward_mean"] == pytest.approx(0.5) and groups[0]["reward_var"] == pytest.approx(0.25)
    assert [m["reward_components"] for m in groups[0]["members"]] == [{"correct": r} for r in (1.0, 0.0, 0.5)]
    rollouts = client.get(f"/api/runs/{run_id}/steps/1/rollouts/?prompts=1").json()["results"]
    assert [r["calls"][0]["completion"] for r in rollouts] == ["cat", "cat dog", "bird"]
    assert rollouts[0]["calls"][0]["prompt"] == "Say a word." and rollouts[1]["calls"][0]["advantage"] == -0.5
    assert rollouts[0]["total_reward"] == 1.0 and rollouts[0]["example_id"] == "0"
    metrics = client.get(f"/api/runs/{run_id}/metrics/").json()["series"]
    assert metrics["loss"]["y"] == [0.25, 0.2] and metrics["reward/mean"]["y"] == [pytest.approx(0.5)]
    assert metrics["group_var/completion"]["y"] == [pytest.approx(0.25)] and "similarity/completion" in metrics
    run = Run.objects.get(pk=run_id)
    assert run.current_step == 2 and run.last_reward == pytest.approx(0.5)


def steps_body(**step):
    return {"steps": [{"step": 1, **step}]}


def rollout(**fields):
    return {"prompt": "p", "completion": "c", "rewards": {"r": 1.0}, **fields}


@pytest.mark.parametrize("body, message", [
    ({}, "'steps' must be a list of 1 to 100 steps"),
    ({"steps": []}, "'steps' must be a list of 1 to 100 steps"),
    ({"steps": [{"step": i} for i in range(101)]}, "'steps' holds 101 steps; at most 100"),
    ({"steps": [5]}, "steps[0] must be an object"),
    ({"steps": [{"metrics": {}}]}, "steps[0].step is required"),
    (steps_body(step=-1), "steps[0].step must be between 0 and 2,147,483,647"),
    (steps_body(step=2_147_483_648), "steps[0].step must be between 0 and 2,147,483,647"),
    (steps_body(step=1.0), "steps[0].step must be an integer, not a number"),
    (steps_body(step=True), "steps[0].step must be an integer, not a boolean"),
    (steps_body(metrics=[1]), "steps[0].metrics must be an object"),
    (steps_body(metrics={f"m{i}": 1.0 for i in range(501)}), "steps[0].metrics holds 501 metrics; at most 500"),
    (steps_body(metrics={"k" * 201: 1.0}), "steps[0].metrics: a metric name has 1 to 200 characters"),
    (steps_body(metrics={"loss": "0.5"}), "steps[0].metrics['loss'] must be a number or null, not a string"),
    (steps_body(metrics={"loss": 10 ** 400}), "steps[0].metrics['loss'] is too large for a number"),
    (steps_body(rollouts={}), "steps[0].rollouts must be a list"),
    (steps_body(rollouts=[rollout()] * 4097), "steps[0].rollouts holds 4,097; at most 4,096"),
    (steps_body(rollouts=[7]), "steps[0].rollouts[0] must be an object"),
    (steps_body(rollouts=[{"completion": "c"}]), "steps[0].rollouts[0].prompt is required"),
    (steps_body(rollouts=[rollout(completion=None)]), "steps[0].rollouts[0].completion must be a string or a list"),
    (steps_body(rollouts=[rollout(prompt="x" * 100_001)]), "steps[0].rollouts[0].prompt has 100,001 characters"),
    (steps_body(rollouts=[rollout(completion=[{"role": "assistant", "content": "x" * 100_000}])]),
     "steps[0].rollouts[0].completion has 100,009 characters of messages"),
    (steps_body(rollouts=[rollout(prompt=[{"role": "user"}])]), "steps[0].rollouts[0].prompt[0] must be a chat message"),
    (steps_body(rollouts=[rollout(), rollout(rewards={f"r{i}": 1.0 for i in range(33)})]),
     "steps[0].rollouts[1].rewards holds 33 rewards; at most 32"),
    (steps_body(rollouts=[rollout(rewards={"r": [1]})]), "steps[0].rollouts[0].rewards['r'] must be a number"),
    (steps_body(rollouts=[rollout(reward="1")]), "steps[0].rollouts[0].reward must be a number or null"),
    (steps_body(rollouts=[rollout(advantage=False)]), "steps[0].rollouts[0].advantage must be a number or null"),
    (steps_body(rollouts=[rollout(group=1.5)]), "steps[0].rollouts[0].group must be a string or an integer"),
    (steps_body(rollouts=[rollout(group="g" * 201)]), "steps[0].rollouts[0].group has at most 200 characters"),
    (steps_body(rollouts=[rollout(example_id="e" * 201)]), "steps[0].rollouts[0].example_id has at most 200"),
    (steps_body(rollouts=[rollout(module="m" * 101)]), "steps[0].rollouts[0].module has at most 100"),
    (steps_body(rollouts=[rollout(module="")]), "steps[0].rollouts[0].module must not be empty"),
    (steps_body(rollouts=[rollout(rewards={f"r{i}": 1.0}) for i in range(33)]), "name 33 rewards; at most 32 a step"),
    (steps_body(rollouts=[rollout(module=f"m{i}") for i in range(33)]), "name 33 modules; at most 32 a step"),
    (steps_body(spans={}), "steps[0].spans must be a list"),
    (steps_body(spans=[{"lane": "trainer", "name": "update", "start": 1.0, "end": 2.0}] * 65),
     "steps[0].spans holds 65; at most 64 a step"),
    (steps_body(spans=[{"lane": "trainer", "name": "update", "start": 1.0, "end": 2.0}, {"lane": "", "name": "x",
                                                                                        "start": 1, "end": 2}]),
     "steps[0].spans[1] must be a bar: a lane of 1 to 50 characters"),
    (steps_body(spans=[{"lane": "sampler", "name": "generate", "start": 1, "end": 2, "policy_version": -1}]),
     "steps[0].spans[0] must be a bar"),
    (steps_body(spans=[{"lane": "sampler", "name": "generate", "start": "1", "end": 2}]),
     "steps[0].spans[0] must be a bar"),
])
def test_steps_bounds(trl_run, body, message):
    run_id, client = trl_run
    response = post(client, f"/api/runs/{run_id}/steps/", body)
    assert response.status_code == 400 and message in response.json()["detail"], response.content[:300]
    assert not StepMetric.objects.filter(run_id=run_id).exists()


@pytest.mark.parametrize("raw", [
    '{"steps": [{"step": 1, "metrics": {"loss": NaN}}]}',
    '{"steps": [{"step": 1, "metrics": {"loss": Infinity}}]}',
    '{"steps": [{"step": 1, "metrics": {"loss": 1e999}}]}',
    '{"steps": [{"step": 1, "rollouts": [{"prompt": "p", "completion": "c", "reward": -1e999}]}]}',
    '{"steps": [',
])
def test_non_finite_numbers_and_broken_json_are_400s(trl_run, raw):
    run_id, client = trl_run
    response = post(client, f"/api/runs/{run_id}/steps/", raw)
    assert response.status_code == 400, response.content
    detail = response.json()["detail"]
    assert "JSON parse error" in detail or "must be finite: send null" in detail


def test_a_steps_body_over_16_mib_is_a_json_413(trl_run):
    run_id, client = trl_run
    big = steps_body(rollouts=[rollout(prompt="x" * 90_000)] * 190)  # about 17 MB
    response = post(client, f"/api/runs/{run_id}/steps/", big)
    assert response.status_code == 413 and "16 MiB" in response.json()["detail"]
    fits = post(client, f"/api/runs/{run_id}/steps/", steps_body(rollouts=[rollout(prompt="x" * 90_000)] * 100))
    assert fits.status_code == 200 and fits.json()["stored"] == [1]  # 9 MB: over Django's 2.5, under 16


def test_nul_in_logged_text_is_stored_as_a_replacement_character(trl_run):
    run_id, client = trl_run
    body = steps_body(metrics={"a\x00b": 1.0}, rollouts=[rollout(completion="x\x00y", module="m\x00", group="g\x00")])
    assert post(client, f"/api/runs/{run_id}/steps/", body).status_code == 200
    assert "a\ufffdb" in StepMetric.objects.get(run_id=run_id).metrics


def test_only_the_owner_logs_and_finishes(trl_run, api_client, stranger, staff):
    run_id, _ = trl_run
    for who, status in ((stranger, 404), (staff, 403), (None, 401)):
        client = api_client(who)
        assert post(client, f"/api/runs/{run_id}/steps/", steps_body()).status_code == status
        assert post(client, f"/api/runs/{run_id}/finish/", {"state": "succeeded"}).status_code == status
    assert post(api_client(stranger), "/api/runs/999999/steps/", steps_body()).status_code == 404
    assert not StepMetric.objects.filter(run_id=run_id).exists()
    assert Run.objects.get(pk=run_id).state == "running"


def test_a_session_post_needs_csrf(trl_run, owner, csrf_client):
    run_id, _ = trl_run
    csrf_client.force_login(owner)
    assert post(csrf_client, f"/api/runs/{run_id}/steps/", steps_body()).status_code == 403
    assert post(csrf_client, CREATE, {"client_id": "s", "task": "t"}).status_code == 403


def test_a_cohort_run_refuses_steps_with_409(api_client, owner):
    run = make_run(owner, state=Run.State.RUNNING)
    response = post(api_client(owner), f"/api/runs/{run.pk}/steps/", steps_body())
    assert response.status_code == 409 and "only a run trained elsewhere" in response.json()["detail"]
    finish = post(api_client(owner), f"/api/runs/{run.pk}/finish/", {"state": "failed"})
    assert finish.status_code == 409 and Run.objects.get(pk=run.pk).state == "running"


# --- finish -------------------------------------------------------------------------------------


def test_finish_then_finish_again_then_steps(trl_run):
    run_id, client = trl_run
    assert post(client, f"/api/runs/{run_id}/steps/", steps_body()).status_code == 200
    finish = f"/api/runs/{run_id}/finish/"
    done = post(client, finish, {"state": "succeeded"})
    assert done.status_code == 200 and done.json()["state"] == "succeeded" and done.json()["summary"]["finished_at"]
    assert post(client, finish, {"state": "succeeded"}).json()["summary"]["finished_at"] == done.json()["summary"]["finished_at"]
    other = post(client, finish, {"state": "failed", "error": "late"})
    assert other.status_code == 409 and "already ended succeeded" in other.json()["detail"]
    retried = post(client, f"/api/runs/{run_id}/steps/", steps_body())
    assert retried.status_code == 200 and retried.json()["skipped"] == [1]
    new = post(client, f"/api/runs/{run_id}/steps/", {"steps": [{"step": 1}, {"step": 2}]})
    assert new.status_code == 409 and "it takes no new step (not stored: 2)" in new.json()["detail"]


@pytest.mark.parametrize("body, message", [
    ({}, "'state' is required"),
    ({"state": "cancelled"}, "'state' must be 'succeeded' or 'failed'"),
    ({"state": "failed", "error": "e" * 10_001}, "'error' has at most 10,000 characters"),
    ({"state": "failed", "error": 5}, "'error' must be a string"),
])
def test_finish_bounds(trl_run, body, message):
    run_id, client = trl_run
    response = post(client, f"/api/runs/{run_id}/finish/", body)
    assert response.status_code == 400 and message in response.json()["detail"]


# --- the pages ----------------------------------------------------------------------------------


def test_the_run_page_has_no_cancel_or_resume_and_says_why(trl_run, client, owner):
    run_id, _ = trl_run
    client.force_login(owner)
    page = client.get(f"/runs/{run_id}/").content.decode()
    assert 'id="cancel-form"' not in page and 'id="resume-form"' not in page
    assert "Trained by TRL outside Cohort and logged through the API: stop or resume it where it trains." in page
    assert 'id="run-origin"' in page
    table = client.get("/runs/").content.decode()
    assert '<span class="badge origin"' in table
    cancel = client.post(f"/runs/{run_id}/cancel")
    assert cancel.status_code == 409 and "stop it where it trains" in cancel.content.decode()
    assert client.post(f"/runs/{run_id}/resume").status_code == 409
    assert Run.objects.get(pk=run_id).state == "running"


def test_a_cohort_run_page_keeps_its_buttons(client, owner):
    run = make_run(owner, state=Run.State.RUNNING)
    client.force_login(owner)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="cancel-form"' in page and 'id="external-note"' not in page and 'id="run-origin"' not in page


# --- live: the run page's socket hears each stored step -----------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_run_pages_socket_gets_a_notice_per_logged_step(owner, token_for):
    make_task("toy_format")
    client = Client(headers={"Authorization": f"Bearer {token_for(owner)}"})
    run_id = post(client, CREATE, {"client_id": "live", "task": "toy_format"}).json()["id"]
    cookie = session_cookie(owner)

    async def scenario():
        socket, connected, _ = await connect(run_id, ORIGIN, (b"cookie", cookie))
        assert connected
        body = {"steps": [{"step": 1, "metrics": {"loss": 0.5}}, {"step": 2, "metrics": {"loss": 0.4}}]}
        response = await database_sync_to_async(post)(client, f"/api/runs/{run_id}/steps/", body)
        assert response.status_code == 200
        first, second = await socket.receive_json_from(timeout=10), await socket.receive_json_from(timeout=10)
        assert [first["type"], first["step"], second["step"]] == ["step", 1, 2]
        assert first["metrics"] == {"loss": 0.5} and second["seq"] == first["seq"] + 1
        await database_sync_to_async(post)(client, f"/api/runs/{run_id}/finish/", {"state": "succeeded"})
        notice = await socket.receive_json_from(timeout=10)
        while notice["type"] != "status":  # an alert rule on the run may speak first
            notice = await socket.receive_json_from(timeout=10)
        assert notice["state"] == "succeeded" and notice["current_step"] == 2
        await socket.disconnect()

    async_to_sync(scenario)()
