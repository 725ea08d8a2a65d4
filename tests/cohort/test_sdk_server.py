"""The SDK (cohort.init, cohort/sdk/) against the real server over HTTP: a run's steps, metrics and
groups stored; an offline run uploaded by the real `cohort sync` command; a server stopped in the
middle of two runs and started again, nothing lost and nothing stored twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cohort
from cohort.client import Client
from cohort.sdk import exit_hook
from cohort.sdk.run import CohortWarning
from cohort.sdk.spool import Spool
from tests.conftest import asgi_server_process, free_port, service_env
from tests.webapp.runs.factories import make_task
from webapp.api.services import token_create
from webapp.projects.models import Role
from webapp.projects.services import member_add, project_create
from webapp.runs.models import CallText, Rollout, Run, StepMetric

NEUTRAL = ("the SDK's own behaviour over HTTP (batches, retries, the run folder, `cohort sync`); the "
           "external-run endpoints it calls, and how they store steps, rollouts and groups, are tested on "
           "both backends by the web app's API tests")
pytestmark = [pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]

COHORT_COMMAND = str(Path(sys.executable).parent / "cohort")  # the console script `pip install` made


@pytest.fixture
def key(owner) -> str:
    return token_create(user=owner, name="sdk")[1]


@pytest.fixture
def task():
    return make_task()


@pytest.fixture(autouse=True)
def no_run_left_unfinished():
    yield
    for run in list(exit_hook._unfinished.values()):
        run.finish(timeout=0)


def rollouts(step: int) -> list[dict]:
    """Two groups of four completions, with two rewards."""
    rows = []
    for group in range(2):
        for i in range(4):
            fmt, content = float(i % 2), float(i < 2 + group)
            rows.append({"prompt": [{"role": "user", "content": f"Repeat: word{group}"}],
                         "completion": f"word{group}{'.' if fmt else ''} {step}-{i}",
                         "rewards": {"format": fmt, "content": content}, "reward": fmt + content,
                         "advantage": fmt + content - 1.0, "group": group, "example_id": f"word{group}"})
    return rows


def stored_steps(run_id: int) -> list[int]:
    return list(StepMetric.objects.filter(run_id=run_id).order_by("step").values_list("step", flat=True))


def test_a_run_logged_with_the_sdk_is_stored_with_its_metrics_and_groups(asgi_server, owner, key, task, tmp_path):
    run = cohort.init(asgi_server, key, task=task.name, name="sdk run", config={"lr": 1e-4}, tags=["sdk"],
                      total_steps=3, dir=tmp_path)
    for step in range(1, 4):
        run.log({"loss": 1 / step}, step=step)
        run.log_rollouts(step, rollouts(step))
        run.log_span("generate", 100.0 * step, 100.0 * step + 6, lane="sampler", policy_version=step - 1)
        run.log({"reward/mean": 0.5 * step}, step=step)
    run.finish()
    assert run.wait(0) and run.url.startswith(asgi_server) and str(run.id) in run.url
    stored = Run.objects.get(pk=run.id)
    assert (stored.owner, stored.state, stored.name, stored.tags) == (owner, "succeeded", "sdk run", ["sdk"])
    assert stored.origin == "sdk" and stored.config["lr"] == 1e-4
    client = Client(asgi_server, key)
    metrics = client.metrics(run.id)
    assert metrics["step"].tolist() == [1, 2, 3]
    assert metrics["loss"].tolist() == pytest.approx([1, 1 / 2, 1 / 3])
    assert metrics["reward/mean"].tolist() == pytest.approx([0.5, 1.0, 1.5])
    groups = client.groups(run.id, 2)
    assert len(groups) == 2 and groups["size"].tolist() == [4, 4]
    assert Rollout.objects.filter(run=stored).count() == 3 * 8
    # Each step's timeline bar, logged with run.log_span, is on the run's timeline.
    assert StepMetric.objects.get(run=stored, step=2).spans == [
        {"lane": "sampler", "name": "generate", "start": 200.0, "end": 206.0, "policy_version": 1}]


def test_a_run_is_logged_into_its_project_where_teammates_read_it(asgi_server, owner, task, tmp_path, make_user):
    lab = project_create(creator=owner, name="sdk-lab")
    teammate = make_user("teammate")
    member_add(lab, user=teammate, role=Role.VIEWER)
    scoped = token_create(user=owner, name="lab", project=lab, can_write=True)[1]
    run = cohort.init(asgi_server, scoped, task=task.name, project="sdk-lab", dir=tmp_path)
    run.log({"loss": 1.0}, step=1)
    run.finish()
    assert run.wait(0) and Run.objects.get(pk=run.id).project == lab
    assert Client(asgi_server, token_create(user=teammate, name="t")[1]).run(run.id)["project"] == "sdk-lab"
    read_only = token_create(user=owner, name="read", can_write=False)[1]
    with pytest.warns(CohortWarning, match="403"):
        refused = cohort.init(asgi_server, read_only, task=task.name, dir=tmp_path / "refused")
        refused.log({"loss": 1.0}, step=1)
        refused.finish(timeout=30)
    assert Run.objects.count() == 1  # the read-only token created nothing


def test_an_offline_run_is_uploaded_by_the_cohort_sync_command(asgi_server, key, task, tmp_path):
    run = cohort.init(asgi_server, task=task.name, mode="offline", dir=tmp_path)
    for step in range(1, 6):
        run.log({"loss": 1 / step}, step=step)
    run.log_rollouts(5, rollouts(5))
    run.finish()
    env = {**os.environ, "COHORT_TOKEN": key}
    done = subprocess.run([COHORT_COMMAND, "sync", str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = Spool.open(run.folder).state["run_id"]
    assert done.stdout.startswith(f"{run.folder}: 5 steps: 5 steps uploaded, 0 already there; finished as "
                                  f"succeeded: {asgi_server}")
    assert stored_steps(run_id) == [1, 2, 3, 4, 5] and Run.objects.get(pk=run_id).state == "succeeded"
    assert Rollout.objects.filter(run_id=run_id).count() == 8
    again = subprocess.run([sys.executable, "-m", "cohort", "sync", str(run.folder)], env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "5 steps: 0 steps uploaded, 0 already there" in again.stdout
    assert stored_steps(run_id) == [1, 2, 3, 4, 5]


def with_tokens(rows: list[dict]) -> list[dict]:
    """The rollouts with their completions token by token: one token per character, made-up numbers."""
    return [{**row, "tokens": list(row["completion"]), "logprobs": [-0.5] * len(row["completion"]),
             "entropies": [float(i % 3) for i in range(len(row["completion"]))]} for row in rows]


def test_per_token_arrays_logged_with_the_sdk_are_stored_and_a_folder_with_bad_ones_still_syncs(
        asgi_server, key, task, tmp_path):
    """Issue 45 over HTTP: the SDK's token arrays are stored with the step (and its mean entropy); a run
    folder holding a bad array (an SDK's checks differ, a hand-edited line) is uploaded by `cohort sync`
    with that array left out and the rest of the step stored, and the command says so and succeeds."""
    run = cohort.init(asgi_server, key, task=task.name, dir=tmp_path / "good")
    sent = with_tokens(rollouts(1))
    run.log_rollouts(1, sent)
    run.finish()
    assert run.wait(0)
    entropies = [e for row in sent for e in row["entropies"]]
    metrics = StepMetric.objects.get(run_id=run.id, step=1).metrics
    assert metrics["tokens/entropy/mean"] == pytest.approx(sum(entropies) / len(entropies))
    assert CallText.objects.filter(run_id=run.id, tokens__isnull=False).count() == 2  # one row per example

    offline = cohort.init(asgi_server, task=task.name, mode="offline", dir=tmp_path / "edited")
    offline.log({"loss": 0.5}, step=1)
    offline.log_rollouts(1, with_tokens(rollouts(1)))
    offline.log({"loss": 0.25}, step=2)
    offline.finish()
    lines = (offline.folder / "steps.jsonl").read_text().splitlines()
    step = json.loads(lines[0])
    step["rollouts"][3]["entropies"] = step["rollouts"][3]["entropies"][:-1]  # one value short
    (offline.folder / "steps.jsonl").write_text("\n".join([json.dumps(step), *lines[1:]]) + "\n")
    done = subprocess.run([COHORT_COMMAND, "sync", str(offline.folder)], env={**os.environ, "COHORT_TOKEN": key},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 steps uploaded, 0 already there, 1 posts stored without per-token arrays the server refused" in done.stdout
    assert "steps[0].rollouts[3].entropies: " in done.stderr and "values for" in done.stderr
    run_id = Spool.open(offline.folder).state["run_id"]
    assert stored_steps(run_id) == [1, 2] and Rollout.objects.filter(run_id=run_id).count() == 8
    assert StepMetric.objects.get(run_id=run_id, step=1).metrics["loss"] == 0.5
    assert not (offline.folder / "rejected.jsonl").exists()


# A program that logs steps 1-5, waits (the test stops the server), logs 6-10, and finishes with a
# timeout shorter than the outage: it exits with steps not uploaded.
PROGRAM = """
import sys, cohort
run = cohort.init(sys.argv[1], task=sys.argv[2], dir=sys.argv[3])
for step in range(1, 6):
    run.log({"loss": 1 / step}, step=step)
run.flush()
assert run.wait(60)
print(run.folder, flush=True)
sys.stdin.readline()
for step in range(6, 11):
    run.log({"loss": 1 / step}, step=step)
run.finish(timeout=1)
"""


@pytest.mark.filterwarnings("ignore:cohort. (cannot upload|reached):cohort.sdk.run.CohortWarning")  # the outage, as expected
def test_a_server_stopped_mid_run_loses_nothing_and_stores_nothing_twice(transactional_db, key, task, tmp_path):
    env = service_env(DATABASE_CONN_MAX_AGE="0")
    port = free_port()
    with asgi_server_process(tmp_path / "daphne-1.log", env, port=port) as url:
        # Run A, in this process: the server comes back before it finishes.
        run = cohort.init(url, key, task=task.name, dir=tmp_path / "a")
        for step in range(1, 6):
            run.log({"loss": 1 / step}, step=step)
            run.log_rollouts(step, rollouts(step))
        run.flush()
        assert run.wait(60) and stored_steps(run.id) == [1, 2, 3, 4, 5]
        # Run B, a program that exits while the server is down.
        program = subprocess.Popen([sys.executable, "-c", PROGRAM, url, task.name, str(tmp_path / "b")],
                                   env={**os.environ, "COHORT_TOKEN": key}, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        folder = program.stdout.readline().strip()
        assert folder, program.communicate(timeout=60)
    # The server is down: logging goes on at the same pace.
    slowest = 0.0
    for step in range(6, 11):
        started = time.perf_counter()
        run.log({"loss": 1 / step}, step=step)
        run.log_rollouts(step, rollouts(step))
        slowest = max(slowest, time.perf_counter() - started)
    assert slowest < 0.05
    run.flush()
    assert not run.wait(0)
    out, err = program.communicate("go\n", timeout=60)
    assert program.returncode == 0, err
    assert "5 of 10 steps are not uploaded yet" in err and f"cohort sync {folder}" in err
    with asgi_server_process(tmp_path / "daphne-2.log", env, port=port):
        run.finish(timeout=60)  # retries at once, without waiting out its backoff
        assert run.wait(0)
        done = subprocess.run([COHORT_COMMAND, "sync", folder], env={**os.environ, "COHORT_TOKEN": key},
                              capture_output=True, text=True, timeout=120)
    assert stored_steps(run.id) == list(range(1, 11)) and Run.objects.get(pk=run.id).state == "succeeded"
    assert Rollout.objects.filter(run_id=run.id).count() == 10 * 8  # every step's rollouts, once
    assert done.returncode == 0, done.stdout + done.stderr
    assert "10 steps: 5 steps uploaded, 0 already there; finished as succeeded" in done.stdout
    b_id = Spool.open(Path(folder)).state["run_id"]
    assert stored_steps(b_id) == list(range(1, 11)) and Run.objects.get(pk=b_id).state == "succeeded"
