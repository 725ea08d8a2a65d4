"""The training loop end to end on the tiny model: learning, exact resume, strategies, the CLI."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from trainer.config import RunConfig
from trainer.run.reporting import JsonlReporter, read_events

pytestmark = pytest.mark.usefixtures("torch_setup")


class ListReporter:
    """Keeps events in memory; can ask the loop to stop after a given step."""

    def __init__(self, stop_after_step: int | None = None):
        self.events, self.statuses, self.stop_after_step = [], [], stop_after_step

    def status(self, state, **info):
        self.statuses.append((state, info))

    def step(self, event):
        json.dumps(event, allow_nan=False)  # every event must be plain JSON for the event log
        self.events.append(event)

    def should_stop(self):
        return self.stop_after_step is not None and bool(self.events) and \
            self.events[-1]["step"] >= self.stop_after_step


def toy_config(**changes) -> RunConfig:
    from trainer.programs.toy import ToyEcho

    base = {**ToyEcho.suggested_config, "steps": 4, "group_size": 4, "rollouts_per_example": 4,
            "eval_every": 0, "checkpoint_every": 2, "seed": 0}
    return RunConfig(**{**base, **changes})


def run(config, tmp_path, name, *, model_cache, reporter=None, resume=False, attempt=1):
    from trainer.run.loop import Trainer

    reporter = reporter or ListReporter()
    trainer = Trainer(config, tmp_path / name, reporter, attempt=attempt, model_cache_dir=model_cache)
    state = trainer.run(resume=resume)
    return trainer, reporter, state


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def test_step_events_carry_every_metric_rollouts_and_groups(tmp_path, model_cache):
    _, reporter, state = run(toy_config(steps=1), tmp_path, "one", model_cache=model_cache)
    assert state == "succeeded"
    event = reporter.events[0]
    metrics = event["metrics"]
    for key in ("reward/mean", "reward/exact_match", "reward/char_f1", "failure_rate", "loss", "kl", "grad_norm", "lr",
                "tokens_per_s", "zero_var_share", "adv_resolution", "time/step_s"):
        assert key in metrics, key
    module = event["groups"][0]["module"]
    assert f"group_var/{module}" in metrics and f"similarity/{module}" in metrics
    assert np.isfinite(metrics["loss"])
    # The synchronous loop's pipeline: the trainer waits while the batch is sampled, the sampler while
    # the trainer trains, so the two shares are the whole step; nothing is stale, queued or dropped.
    assert metrics["pipeline/trainer_wait_share"] == pytest.approx(metrics["time/sampling_s"] / metrics["time/step_s"])
    assert 0 < metrics["pipeline/trainer_wait_share"] < 1
    assert metrics["pipeline/trainer_wait_share"] + metrics["pipeline/sampler_wait_share"] == pytest.approx(1.0)
    for key in ("staleness/mean", "staleness/max", "dropped_stale", "queue_depth", "adapter_sync_s"):
        assert metrics[f"pipeline/{key}"] == 0.0, key  # the hf backend samples with the trained weights
    # The step's timeline: the batch's generation on the sampler's lane, then the trainer's work, in order.
    spans = event["spans"]
    assert [(s["lane"], s["name"].split(" ")[0]) for s in spans] == [
        ("sampler", "generate"), ("trainer", "groups"), ("trainer", "update"), ("trainer", "metrics")]
    assert spans[0]["policy_version"] == 0 and "with version 0" in spans[0]["name"]
    assert all(s["start"] <= s["end"] for s in spans)
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(spans))  # nothing overlaps when synchronous
    assert len(event["rollouts"]) == 4 * 4  # examples x rollouts
    assert all(len(g["members"]) == 4 for g in event["groups"])
    # Each group carries the stats the dashboard stores, and each member the rewards behind its advantage.
    for group in event["groups"]:
        rewards = [m["reward"] for m in group["members"]]
        assert group["reward_mean"] == pytest.approx(np.mean(rewards))
        assert group["reward_var"] == pytest.approx(np.var(rewards, ddof=1))
        assert 0.0 <= group["similarity"] <= 1.0
        assert set(group["members"][0]["reward_components"]) == {"exact_match", "char_f1"}


def test_resume_replays_the_remaining_steps_exactly(tmp_path, model_cache):
    config = toy_config(steps=4, checkpoint_every=2)
    _, straight, _ = run(config, tmp_path, "straight", model_cache=model_cache)
    _, first, state = run(config, tmp_path, "split", model_cache=model_cache, reporter=ListReporter(stop_after_step=2))
    assert state == "cancelled" and [e["step"] for e in first.events] == [1, 2]
    _, second, state = run(config, tmp_path, "split", model_cache=model_cache, resume=True, attempt=2)
    assert state == "succeeded"
    assert [e["step"] for e in second.events] == [3, 4]
    # Each step's batch was sampled by the weights after the updates before it, a resume included.
    for event in first.events + second.events:
        assert {r["policy_version"] for r in event["rollouts"]} == {event["step"] - 1}
        assert event["metrics"]["pipeline/staleness/max"] == 0.0
    for resumed, original in zip(second.events, straight.events[2:], strict=True):
        for key in ("reward/mean", "loss", "grad_norm", "kl"):
            assert resumed["metrics"][key] == pytest.approx(original["metrics"][key], rel=1e-6, abs=1e-9), key


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["grpo", "gdpo"])
def test_toy_task_learns(tmp_path, model_cache, estimator):
    config = toy_config(steps=40, group_size=16, rollouts_per_example=16, estimator=estimator, checkpoint_every=0)
    _, reporter, _ = run(config, tmp_path, estimator, model_cache=model_cache)
    curve = [e["metrics"]["reward/mean"] for e in reporter.events]
    first, last = float(np.mean(curve[:10])), float(np.mean(curve[-10:]))
    print(f"{estimator}: mean reward first 10 steps {first:.3f}, last 10 {last:.3f}")
    assert last > first + 0.2


def test_cli_trains_writes_events_and_checkpoints_then_resumes(tmp_path, model_cache):
    config_path = tmp_path / "toy.toml"
    config_path.write_text('program = "toy"\nsteps = 2\nexamples_per_step = 2\ngroup_size = 2\n'
                           'rollouts_per_example = 2\nmax_new_tokens = 3\nmax_context_length = 64\n'
                           'eval_every = 0\ncheckpoint_every = 1\n')
    env = {"COHORT_MODEL_CACHE": str(model_cache)}
    cmd = [sys.executable, "-m", "trainer", "train", "--config", str(config_path), "--run-dir", str(tmp_path / "r"),
           "--quiet"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**__import__("os").environ, **env})
    assert result.returncode == 0, result.stderr
    events = read_events(tmp_path / "r" / "events.jsonl")
    assert [e["step"] for e in events if e["type"] == "step"] == [1, 2]
    assert events[-1] == {"type": "status", "state": "succeeded", "step": 2}
    assert (tmp_path / "r" / "checkpoints" / "step-000002" / "COMPLETE").exists()
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**__import__("os").environ, **env})
    assert again.returncode == 2 and "pass --resume" in again.stderr


def test_cli_reports_a_bad_config_clearly(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('strategy = "ppo"\n')
    result = subprocess.run([sys.executable, "-m", "trainer", "train", "--config", str(path)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert "strategy must be one of 'grpo', 'mmgrpo', 'mhgpo'" in result.stderr


def test_jsonl_reporter_stop_file_and_torn_lines(tmp_path):
    reporter = JsonlReporter(tmp_path / "events.jsonl", stop_file=tmp_path / "STOP")
    reporter.step({"attempt": 1, "step": 1, "metrics": {"reward/mean": float("nan")}, "rollouts": [], "groups": []})
    assert not reporter.should_stop()
    (tmp_path / "STOP").touch()
    assert reporter.should_stop()
    with open(tmp_path / "events.jsonl", "a") as handle:
        handle.write('{"type": "step", "ste')  # a crash mid-write
    events = read_events(tmp_path / "events.jsonl")
    assert len(events) == 1 and events[0]["metrics"] == {"reward/mean": None}


def test_the_running_status_says_how_many_gpus_the_run_holds(tmp_path, model_cache):
    """The dashboard's GPU-hours come from this count: 0 on a CPU, the visible CUDA devices on a GPU."""
    import torch

    from trainer.run.setup import visible_gpus

    _, reporter, _ = run(toy_config(steps=1, device="cpu"), tmp_path, "gpus", model_cache=model_cache)
    state, info = reporter.statuses[0]
    assert state == "running" and info["gpus"] == 0
    assert visible_gpus(torch.device("cpu")) == 0
    if torch.cuda.is_available():
        assert visible_gpus(torch.device("cuda")) == torch.cuda.device_count() >= 1


def test_a_succeeded_run_leaves_its_trained_adapter_in_the_run_folder(tmp_path, tiny_model_path):
    """What the API's adapter download and cohort.dspy hand out: PEFT's own format, loadable as is."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from trainer.config import RunConfig
    from trainer.policy.adapter_files import FINAL_ADAPTER_DIR
    from trainer.run.loop import Trainer
    from trainer.run.reporting import JsonlReporter

    config = RunConfig(program="toy", model=str(tiny_model_path), steps=1, group_size=2, rollouts_per_example=2,
                       examples_per_step=1, max_new_tokens=4, checkpoint_every=0)
    trainer = Trainer(config, tmp_path, JsonlReporter(tmp_path / "events.jsonl"))
    assert not (tmp_path / FINAL_ADAPTER_DIR).exists()
    assert trainer.run() == "succeeded"
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_path),
                                       tmp_path / FINAL_ADAPTER_DIR)
    trained = {k: v for k, v in trainer.parts.model.state_dict().items() if "lora_" in k}
    assert trained and all((loaded.state_dict()[k] == v).all() for k, v in trained.items())


def test_eval_before_stores_the_untrained_programs_score_as_step_0_and_a_direct_evaluation_agrees(
        tmp_path, tiny_model_path):
    from trainer.config import RunConfig
    from trainer.run.loop import Trainer
    from trainer.run.reporting import JsonlReporter, read_events

    config = RunConfig(program="toy", model=str(tiny_model_path), steps=1, group_size=2, rollouts_per_example=2,
                       examples_per_step=1, max_new_tokens=4, checkpoint_every=0, eval_every=1, eval_size=4,
                       eval_before=True)
    trainer = Trainer(config, tmp_path / "run", JsonlReporter(tmp_path / "run" / "events.jsonl"))
    assert trainer.run() == "succeeded"
    steps = [e for e in read_events(tmp_path / "run" / "events.jsonl") if e["type"] == "step"]
    assert [s["step"] for s in steps] == [0, 1]
    assert steps[0]["rollouts"] == [] and set(steps[0]["metrics"]) >= {"eval/reward/mean"}
    fresh = Trainer(config, tmp_path / "again", JsonlReporter(tmp_path / "again" / "events.jsonl"))
    assert fresh.evaluate(0) == steps[0]["metrics"]  # the same code, seeds and weights: the same score
