"""`cohort import` (the real console script) against the real server: W&B, TensorBoard and verl runs
stored as external runs with their steps, rollouts and groups; importing again stores no step twice
and a grown source reopens its run; a bad source or a dry run writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client as PageClient
from django.urls import reverse

from tests.trainer.importers.writers import (
    write_tensorboard_log,
    write_trl_wandb_run,
    write_verl_run,
    write_verl_step,
    write_wandb_run,
)
from webapp.api.services import token_create
from webapp.runs.models import Group, Rollout, Run, StepMetric

NEUTRAL = ("the importer's reading and upload over HTTP; the external-run endpoints and their storage are "
           "tested on both backends by the web app's API tests")
pytestmark = [pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]

COHORT_COMMAND = str(Path(sys.executable).parent / "cohort")


@pytest.fixture
def key(owner) -> str:
    return token_create(user=owner, name="import")[1]


@pytest.fixture(scope="module")
def wandb_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wandb")
    write_wandb_run(root, steps=20)
    return root / "wandb"


def cohort_import(server: str, key: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COHORT_TOKEN": key, "COHORT_URL": server}
    return subprocess.run([COHORT_COMMAND, "import", *args], env=env, capture_output=True, text=True, timeout=300)


def steps_of(run: Run) -> list[int]:
    return list(StepMetric.objects.filter(run=run).order_by("step").values_list("step", flat=True))


def test_a_wandb_offline_run_is_imported_with_its_groups_and_the_group_page_shows_them(
        asgi_server, owner, key, wandb_root):
    done = cohort_import(asgi_server, key, str(wandb_root), "--task", "toy_format", "--tag", "trl")
    assert done.returncode == 0, done.stdout + done.stderr
    run = Run.objects.get()
    assert (run.origin, run.state, run.name, run.tags, run.task.name) == ("wandb", "succeeded", "grpo smollm2",
                                                                         ["trl"], "toy_format")
    assert run.config["learning_rate"] == 1e-5 and run.config["_import"]["source"].endswith(".wandb")
    assert run.config["_import"]["summary"]["best_reward"] == 0.95 and run.config["_import"]["importer"]
    assert steps_of(run) == [2 * i for i in range(1, 21)]
    reward = StepMetric.objects.get(run=run, step=20).metrics["train/reward"]
    assert reward == pytest.approx(0.5)
    assert Rollout.objects.filter(run=run).count() == 24
    groups = Group.objects.filter(run=run, step=10)
    assert groups.count() == 2 and all(g.members.count() == 3 for g in groups)
    page = PageClient()
    page.force_login(owner)
    answer = page.get(reverse("runs:group", args=[run.pk, groups.first().pk]))
    assert answer.status_code == 200 and "answer 1 at 5" in answer.content.decode()
    assert "24 stored" not in done.stdout and f"runs/{run.pk}/" in done.stdout


def test_importing_again_stores_no_step_twice_and_a_grown_source_reopens_its_run(asgi_server, key, tmp_path):
    root = write_verl_run(tmp_path / "verl", steps=3)
    first = cohort_import(asgi_server, key, str(root), "--task", "gsm8k")
    assert first.returncode == 0, first.stderr
    run = Run.objects.get()
    assert run.origin == "verl" and run.state == "succeeded" and steps_of(run) == [1, 2, 3]
    again = cohort_import(asgi_server, key, str(root), "--task", "gsm8k")
    assert again.returncode == 0 and "0 stored" in again.stdout
    write_verl_step(root, 4)
    grown = cohort_import(asgi_server, key, str(root), "--task", "gsm8k")
    assert grown.returncode == 0, grown.stderr
    run.refresh_from_db()
    assert Run.objects.count() == 1 and steps_of(run) == [1, 2, 3, 4] and run.state == "succeeded"
    assert StepMetric.objects.filter(run=run).count() == 4 and Rollout.objects.filter(run=run).count() == 24


def test_a_tensorboard_log_is_imported_with_a_mapping(asgi_server, key, tmp_path):
    logdir = write_tensorboard_log(tmp_path / "tb", steps=10)
    mapping = tmp_path / "map.toml"
    mapping.write_text('[metrics]\n"train/reward" = "reward/mean"\n')
    done = cohort_import(asgi_server, key, str(logdir), "--map", str(mapping))
    assert done.returncode == 0, done.stderr
    run = Run.objects.get()
    assert run.origin == "tensorboard" and run.config["optimizer"] == "adam" and "lr warm-up ends here" in run.notes
    values = StepMetric.objects.get(run=run, step=4).metrics
    assert values["reward/mean"] == pytest.approx(1.0) and "train/reward" not in values


def test_a_bad_source_names_its_line_and_imports_nothing_unless_skip_bad(asgi_server, key, tmp_path):
    root = write_verl_run(tmp_path / "verl", steps=3)
    with (root / "grpo-gsm8k.jsonl").open("ab") as log:
        log.write(b"not json\n")
    refused = cohort_import(asgi_server, key, str(root))
    assert refused.returncode == 1 and "grpo-gsm8k.jsonl: line 4: not JSON" in refused.stderr
    assert Run.objects.count() == 0
    kept = cohort_import(asgi_server, key, str(root), "--skip-bad")
    assert kept.returncode == 0 and "line 4: not JSON" in kept.stdout
    assert steps_of(Run.objects.get()) == [1, 2, 3]


def test_a_dry_run_prints_the_mapping_and_writes_nothing(asgi_server, key, wandb_root):
    done = cohort_import(asgi_server, key, str(wandb_root), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "20 steps (2-40), 5 metrics, 24 rollouts" in done.stdout
    assert "train/reward: 20 values, steps 2-40" in done.stdout
    assert "table 'completions': 24 rows -> rollouts at 4 steps in 8 groups" in done.stdout
    assert Run.objects.count() == 0


def test_a_trl_run_logged_to_wandb_offline_is_imported_with_its_completions_as_groups(
        asgi_server, owner, key, tmp_path_factory):
    """The real writer end to end: TRL's GRPOTrainer reporting to W&B offline (a tiny random Llama, 3 steps)."""
    import json

    from trainer.models import build_tiny_model

    root = tmp_path_factory.mktemp("trl")
    write_trl_wandb_run(root, build_tiny_model(root / "tiny-llama"))
    done = cohort_import(asgi_server, key, str(root / "wandb"), "--task", "toy_format")
    assert done.returncode == 0, done.stdout + done.stderr
    run = Run.objects.get()
    assert run.origin == "wandb" and run.name == "trl tiny" and run.config["num_generations"] == 2
    history = [entry for entry in json.loads((root / "log_history.json").read_text()) if "reward" in entry]
    assert [entry["step"] for entry in history] == [1, 2, 3]
    for entry in history:  # every scalar TRL logged, at TRL's global step
        metrics = StepMetric.objects.get(run=run, step=entry["step"]).metrics
        assert metrics["train/reward"] == pytest.approx(entry["reward"])
        assert metrics["train/loss"] == pytest.approx(entry["loss"])
    rollouts = Rollout.objects.filter(run=run)
    assert rollouts.exists() and set(rollouts.values_list("step", flat=True)) <= {1, 2, 3}
    assert all(set(r.reward_components) == {"ends_with_period", "short"} for r in rollouts)  # TRL's reward columns
    group = Group.objects.filter(run=run).first()
    assert group.members.count() == 2  # num_generations completions of one prompt
    page = PageClient()
    page.force_login(owner)
    assert page.get(reverse("runs:group", args=[run.pk, group.pk])).status_code == 200
