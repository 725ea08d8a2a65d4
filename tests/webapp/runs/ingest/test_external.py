"""Runs trained elsewhere (webapp/runs/ingest/external.py): created once per client id, steps stored once
with the trainer's group statistics and metrics, finished by their trainer, never cancelled, resumed
or reaped by Cohort, and never offered by the launch form."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest
from django.utils import timezone

from tests.webapp.runs.factories import make_run, make_task
from trainer.algorithms.groups import GroupMember as TrainerMember
from trainer.algorithms.groups import ModuleGroup
from trainer.algorithms.metrics import annotate_group_stats, module_group_metrics, zero_variance_share
from trainer.rollouts.trajectory import ModuleCall as TrainerCall
from trainer.rollouts.trajectory import Trajectory
from webapp.limits.models import LimitOverride
from webapp.runs.ingest.external import (
    SIMILARITY_MAX_MEMBERS,
    ExternalConflict,
    ExternalLimit,
    external_run_finish,
    external_run_start,
    external_steps_log,
    step_event,
)
from webapp.runs.ingest.retention import Retention
from webapp.runs.launch.catalog import catalog_sync, programs_sync
from webapp.runs.launch.forms import RunLaunchForm
from webapp.runs.models import EXTERNAL_PROGRAM, Group, InvalidTransition, Rollout, Run, StepMetric, Task
from webapp.runs.services import RunsActive, run_cancel, run_resume, runs_delete, runs_reap_stale

pytestmark = pytest.mark.django_db

# Two groups of four: (completion, format, correct); one correct reward unknown.
GROUPS = {
    "q0": [("Paris.", 1.0, 1.0), ("paris", 0.0, 1.0), ("London.", 1.0, 0.0), ("Rome", 0.0, None)],
    "q1": [("The answer is 4.", 1.0, 1.0)] * 4,
}


def rollouts(groups=GROUPS, *, module=None):
    out = []
    for group, rows in groups.items():
        for completion, fmt, correct in rows:
            rollout = {"prompt": f"Question {group}?", "completion": completion,
                       "rewards": {"format": fmt, "correct": correct}, "advantage": 0.5, "group": group}
            if module:
                rollout["module"] = module
            out.append(rollout)
    return out


def start(owner, client_id="c-1", **values):
    defaults = {"task": "toy_format", "name": "trl run", "config": {"learning_rate": 1e-6, "num_generations": 4},
                "tags": ["trl"], "notes": "", "origin": "trl", "total_steps": 10}
    return external_run_start(owner, client_id=client_id, **{**defaults, **values})


# --- start ------------------------------------------------------------------------------------------


def test_start_is_idempotent_by_client_id_per_owner(owner, stranger):
    run, created = start(owner)
    again, created_again = start(owner, name="another name")
    assert created and not created_again and again.pk == run.pk and again.name == "trl run"
    theirs, created_theirs = start(stranger)
    assert created_theirs and theirs.pk != run.pk
    assert run.state == Run.State.RUNNING and run.started_at and run.heartbeat_at and run.origin == "trl"
    assert run.is_external and run.config == {"learning_rate": 1e-6, "num_generations": 4}
    assert Run.objects.filter(external_id="c-1").count() == 2


def test_an_existing_task_is_used_and_an_unknown_one_is_created_on_the_external_program(owner):
    toy = make_task("toy_format")
    run, _ = start(owner)
    assert run.task_id == toy.pk
    other, _ = start(owner, client_id="c-2", task="my-trl-task")
    task = Task.objects.get(name="my-trl-task")
    assert other.task_id == task.pk and task.created_by == owner and task.dataset is None
    program = task.program
    assert (program.name, program.title, program.modules, program.is_active) == (
        EXTERNAL_PROGRAM, "Trained elsewhere", ["completion"], False)
    programs_sync()  # the registry's sync leaves it inactive, and the launch form offers neither
    program.refresh_from_db()
    assert not program.is_active
    form = RunLaunchForm(user=owner)
    assert task not in form.fields["task"].queryset and toy in form.fields["task"].queryset
    assert program not in form.fields["program"].queryset


def test_a_builtin_task_a_run_named_before_the_catalog_sync_becomes_the_real_one(owner):
    run, _ = start(owner, task="toy_format")
    assert run.task.program.name == EXTERNAL_PROGRAM
    catalog_sync()
    run.refresh_from_db()
    assert run.task.name == "toy_format" and run.task.program.name == "toy_format" and run.task.rewards
    assert run.task in RunLaunchForm(user=owner).fields["task"].queryset


def test_the_active_run_limit_counts_runs_trained_elsewhere(owner, staff):
    LimitOverride.objects.create(user=owner, active_runs=2)
    make_run(owner, state=Run.State.QUEUED)
    start(owner, client_id="first")
    with pytest.raises(ExternalLimit, match="You already have 2 active runs; your limit is 2"):
        start(owner, client_id="second")
    assert start(owner, client_id="first")[1] is False  # a retried create is answered at the limit
    LimitOverride.objects.create(user=staff, active_runs=0)
    assert start(staff, client_id="staff")[1]  # staff bypass, as at launch


# --- steps ------------------------------------------------------------------------------------------


def test_steps_are_stored_once_and_a_retry_is_skipped(owner):
    run, _ = start(owner)
    steps = [{"step": 1, "metrics": {"loss": 0.5}, "rollouts": rollouts()}, {"step": 2, "metrics": {"loss": 0.4}}]
    assert external_steps_log(run, steps) == {"stored": [1, 2], "skipped": []}
    assert external_steps_log(run, steps + [{"step": 3}]) == {"stored": [3], "skipped": [1, 2]}
    assert StepMetric.objects.filter(run=run).count() == 3
    assert Rollout.objects.filter(run=run).count() == 8 and Group.objects.filter(run=run).count() == 2
    run.refresh_from_db()
    assert run.current_step == 3 and run.last_seq == 3 and run.storage_bytes > 0


def test_groups_and_metrics_are_the_trainers_own(owner):
    """Each group's statistics and the step's group metrics equal what the trainer computes from the
    same completions and rewards (annotate_group_stats, module_group_metrics, zero_variance_share)."""
    run, _ = start(owner)
    external_steps_log(run, [{"step": 1, "metrics": {"loss": 0.5, "similarity/completion": 0.123},
                              "rollouts": rollouts()}])
    groups, rewards = [], []
    for name, rows in GROUPS.items():
        members = [TrainerMember(TrainerCall("completion", 0, f"Question {name}?", text, True), Trajectory(name))
                   for text, _, _ in rows]
        groups.append(ModuleGroup(name, "completion", 0, members, name))
        rewards += [fmt + (correct or 0.0) for _, fmt, correct in rows]
    annotate_group_stats(groups, rewards)
    expected = module_group_metrics(groups, rewards)
    stored = list(Group.objects.filter(run=run).order_by("index"))
    for group, trainer_group in zip(stored, groups, strict=True):
        assert group.kind == "homogeneous" and group.size == 4 and group.example_id == trainer_group.example_id
        assert group.reward_mean == pytest.approx(trainer_group.reward_mean)
        assert group.reward_var == pytest.approx(trainer_group.reward_var)
        assert group.similarity == pytest.approx(trainer_group.similarity)
    members = list(stored[0].members.order_by("position"))
    assert [m.reward for m in members] == [2.0, 1.0, 1.0, 0.0]
    assert members[3].reward_components == {"format": 0.0, "correct": None} and members[0].advantage == 0.5
    metrics = StepMetric.objects.get(run=run, step=1).metrics
    assert metrics["group_var/completion"] == pytest.approx(expected["group_var/completion"])
    assert metrics["zero_var_share/completion"] == pytest.approx(expected["zero_var_share/completion"]) == 0.5
    assert metrics["similarity/completion"] == 0.123  # sent by the client: kept, not derived
    ids = np.repeat([0, 1], 4)
    assert metrics["zero_var_share"] == pytest.approx(zero_variance_share(np.asarray(rewards), ids))
    assert metrics["reward/mean"] == pytest.approx(np.mean(rewards))
    assert metrics["reward/format"] == pytest.approx(0.75) and metrics["reward/correct"] == pytest.approx(6 / 7)
    assert metrics["loss"] == 0.5
    run.refresh_from_db()
    assert run.last_reward == pytest.approx(np.mean(rewards)) == run.best_reward


def test_a_rollouts_defaults_and_chat_messages():
    step = {"step": 4, "rollouts": [
        {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
         "completion": [{"role": "assistant", "content": "4"}], "rewards": {"a": 1.0, "b": None, "c": 0.5}},
        {"prompt": "p", "completion": "c", "rewards": {"a": 1.0}, "reward": None, "group": 7},
        {"prompt": "p", "completion": "c", "rewards": {}, "group": 7, "example_id": "ex", "module": "answerer"},
    ]}
    event = step_event(step, attempt=1)
    first, second, third = event["rollouts"]
    assert first["reward"] == 1.5 and first["example_id"] == "0" and first["group_id"] is None
    call = first["calls"][0]
    assert call["prompt"] == "system: Be brief.\n\nuser: 2+2?" and call["completion"] == "4"
    assert call["messages"][1] == {"role": "user", "content": "2+2?"} and call["module"] == "completion"
    assert call["propagated_reward"] == 1.5 and call["parsed_ok"] and call["invocation_index"] == 0
    assert second["reward"] is None and second["example_id"] == "7"
    assert third["reward"] is None and third["example_id"] == "ex" and third["calls"][0]["module"] == "answerer"
    # (module, group) makes a group: the same group id under two modules is two groups of one
    assert [(g["module"], len(g["members"])) for g in event["groups"]] == [("completion", 1), ("answerer", 1)]
    assert event["groups"][0]["reward_var"] is None and event["groups"][0]["similarity"] is None
    assert event["metrics"]["reward/mean"] == 1.5 and event["metrics"]["reward/a"] == 1.0
    assert math.isnan(event["metrics"]["reward/b"])  # never known: stored as null
    assert event["metrics"]["zero_var_share"] == 1.0


def test_a_rollouts_token_arrays_become_its_calls_tokens_and_the_steps_mean_entropy():
    """Issue 45: tokens, logprobs and entropies (checked by the API) become the call's "tokens" dict, with
    only the keys sent; tokens/entropy/mean is the mean over every token that has an entropy."""
    step = {"step": 1, "rollouts": [
        {"prompt": "p", "completion": "Hello", "group": 0, "tokens": ["He", "llo", "<|im_end|>"],
         "logprobs": [-0.5, -0.25, 0.0], "entropies": [1.0, 2.0, 3.0]},
        {"prompt": "p", "completion": "Hi", "group": 0, "tokens": ["Hi"], "entropies": [6.0]},
        {"prompt": "p", "completion": "Yo", "group": 0, "tokens": ["Yo"], "logprobs": [-1.0]},
        {"prompt": "p", "completion": "no tokens", "group": 0},
        {"prompt": "p", "completion": "", "group": 0, "tokens": []},
    ]}
    event = step_event(step, attempt=1)
    calls = [t["calls"][0] for t in event["rollouts"]]
    assert calls[0]["tokens"] == {"pieces": ["He", "llo", "<|im_end|>"], "sampler": [-0.5, -0.25, 0.0],
                                  "entropy": [1.0, 2.0, 3.0]}
    assert calls[1]["tokens"] == {"pieces": ["Hi"], "entropy": [6.0]}
    assert calls[2]["tokens"] == {"pieces": ["Yo"], "sampler": [-1.0]}
    assert "tokens" not in calls[3] and "tokens" not in calls[4]  # no tokens, or none: no details
    assert event["metrics"]["tokens/entropy/mean"] == pytest.approx(12.0 / 4)  # per token, not per rollout
    assert not [key for key in event["metrics"] if key.startswith("tokens/entropy/mean/")]  # one module
    sent = step_event({**step, "metrics": {"tokens/entropy/mean": 0.5}}, attempt=1)
    assert sent["metrics"]["tokens/entropy/mean"] == 0.5  # the client's own value is kept
    without = step_event({"step": 1, "rollouts": [{**r, "entropies": None} for r in step["rollouts"]]}, attempt=1)
    assert "tokens/entropy/mean" not in without["metrics"]
    huge = step_event({"step": 1, "rollouts": [{"prompt": "p", "completion": "ab", "tokens": ["a", "b"],
                                                "entropies": [1e308, 1e308]}]}, attempt=1)
    assert math.isnan(huge["metrics"]["tokens/entropy/mean"])  # finite values whose sum is not: unknown (null)


def test_several_modules_get_a_mean_entropy_each():
    step = {"step": 1, "rollouts": [
        {"prompt": "p", "completion": "ab", "module": "writer", "tokens": ["a", "b"], "entropies": [1.0, 3.0]},
        {"prompt": "p", "completion": "c", "module": "judge", "tokens": ["c"], "entropies": [5.0]},
        {"prompt": "p", "completion": "d", "module": "other"},
    ]}
    metrics = step_event(step, attempt=1)["metrics"]
    assert metrics["tokens/entropy/mean"] == pytest.approx(3.0)
    assert metrics["tokens/entropy/mean/writer"] == pytest.approx(2.0) and metrics["tokens/entropy/mean/judge"] == 5.0
    assert "tokens/entropy/mean/other" not in metrics


def test_a_call_takes_only_the_arrays_as_long_as_its_tokens():
    """external_steps_log's callers outside the API (tests, the browser seeds) pass unchecked steps: an
    array of another length never reaches the call."""
    event = step_event({"step": 1, "rollouts": [{"prompt": "p", "completion": "ab", "tokens": ["a", "b"],
                                                 "logprobs": [-1.0], "entropies": [0.5, 0.5]}]}, attempt=1)
    assert event["rollouts"][0]["calls"][0]["tokens"] == {"pieces": ["a", "b"], "entropy": [0.5, 0.5]}


def test_a_large_groups_similarity_is_measured_on_evenly_spaced_members():
    texts = [f"word{i}" for i in range(SIMILARITY_MAX_MEMBERS * 3)]
    step = {"step": 1, "rollouts": [{"prompt": "p", "completion": t, "rewards": {"r": float(i)}, "group": "g"}
                                    for i, t in enumerate(texts)]}
    group = step_event(step, attempt=1)["groups"][0]
    assert group["similarity"] == 0.0 and len(group["members"]) == len(texts)


def test_a_cohort_run_refuses_logged_steps_and_finish(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    with pytest.raises(ExternalConflict, match="only a run trained elsewhere"):
        external_steps_log(run, [{"step": 1}])
    with pytest.raises(ExternalConflict):
        external_run_finish(run, state="succeeded")
    assert not StepMetric.objects.filter(run=run).exists()


# --- finish, and what Cohort does not do ---------------------------------------------------------


def test_finish_is_idempotent_and_an_ended_run_takes_only_stored_steps(owner):
    run, _ = start(owner)
    external_steps_log(run, [{"step": 1}])
    finished = external_run_finish(run, state="failed", error="CUDA out of memory")
    assert finished.state == "failed" and finished.error == "CUDA out of memory" and finished.finished_at
    assert external_run_finish(run, state="failed", error="other").error == "CUDA out of memory"
    with pytest.raises(ExternalConflict, match="already ended failed"):
        external_run_finish(run, state="succeeded")
    assert external_steps_log(run, [{"step": 1}]) == {"stored": [], "skipped": [1]}
    with pytest.raises(ExternalConflict, match="is failed: it takes no new step"):
        external_steps_log(run, [{"step": 1}, {"step": 2}])
    assert list(StepMetric.objects.filter(run=run).values_list("step", flat=True)) == [1]


def test_cancel_and_resume_are_refused_and_the_reaper_skips_it(owner):
    run, _ = start(owner)
    with pytest.raises(InvalidTransition, match="trained by TRL outside Cohort"):
        run_cancel(run)
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - dt.timedelta(hours=2))
    stale = make_run(owner, state=Run.State.RUNNING, heartbeat_at=timezone.now() - dt.timedelta(hours=2))
    assert runs_reap_stale(timeout=dt.timedelta(minutes=5)) == [stale.pk]
    run.refresh_from_db()
    assert run.state == Run.State.RUNNING
    external_run_finish(run, state="failed")
    with pytest.raises(InvalidTransition, match="resume it where it trains"):
        run_resume(run)


def test_a_running_external_run_can_be_deleted_a_running_cohort_run_cannot(owner):
    """Its trainer may have died without finishing it, and no worker of ours writes to it."""
    run, _ = start(owner)
    external_steps_log(run, [{"step": 1, "metrics": {"loss": 1.0}, "rollouts": rollouts()}])
    cohort_run = make_run(owner, state=Run.State.RUNNING)
    with pytest.raises(RunsActive, match="still active: cancel first"):
        runs_delete([run, cohort_run])
    assert runs_delete([run]) == 1
    assert not Run.objects.filter(pk=run.pk).exists() and not StepMetric.objects.filter(run_id=run.pk).exists()
    assert not Group.objects.filter(run_id=run.pk).exists() and Run.objects.filter(pk=cohort_run.pk).exists()


def test_retention_reads_junk_in_a_clients_config_as_keep_all(owner):
    run, _ = start(owner, config={"keep_rollouts_last_steps": "all", "keep_rollouts_every": [2]})
    assert not Retention.of(run).active
    run.config = {"keep_rollouts_last_steps": 2}
    assert Retention.of(run).last_steps == 2


# --- runs imported from another trainer's files (trainer/importers) --------------------------------------


def test_an_imported_run_started_again_takes_the_sources_newer_config_and_name(owner):
    run, created = external_run_start(owner, client_id="import-verl-1", task="gsm8k", name="old", origin="verl",
                                      config={"lr": 1}, total_steps=3)
    again, created_again = external_run_start(owner, client_id="import-verl-1", task="gsm8k", name="new",
                                              origin="verl", config={"lr": 2}, total_steps=5)
    assert created and not created_again and again.pk == run.pk
    run.refresh_from_db()
    assert (run.name, run.config, run.total_steps) == ("new", {"lr": 2}, 5)
    sdk, _ = external_run_start(owner, client_id="sdk-1", task="gsm8k", name="mine", config={"lr": 1})
    external_run_start(owner, client_id="sdk-1", task="gsm8k", name="other", config={"lr": 9})
    sdk.refresh_from_db()
    assert (sdk.name, sdk.config) == ("mine", {"lr": 1})  # an SDK run's first create is the one kept


def test_a_new_step_reopens_a_finished_imported_run_but_never_another_origin(owner):
    step = {"step": 1, "metrics": {"loss": 1.0}, "rollouts": []}
    imported, _ = external_run_start(owner, client_id="import-wandb-1", task="gsm8k", origin="wandb")
    external_steps_log(imported, [step])
    external_run_finish(imported, state="succeeded")
    result = external_steps_log(imported, [step, {**step, "step": 2}])
    imported.refresh_from_db()
    assert result == {"stored": [2], "skipped": [1]} and imported.state == "running" and imported.finished_at is None
    external_run_finish(imported, state="succeeded")
    sdk, _ = external_run_start(owner, client_id="sdk-2", task="gsm8k")
    external_steps_log(sdk, [step])
    external_run_finish(sdk, state="succeeded")
    with pytest.raises(ExternalConflict):
        external_steps_log(sdk, [{**step, "step": 2}])
